#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver and
# kube-controller-manager v1.20.2 (built once from Debian's source package and cached),
# plus the test node agent (tests/node-agent), which stands in for the kubelet.
#
#   tests/local-cluster.sh up       start (or reuse) the cluster; last line: export KUBECONFIG=...
#   tests/local-cluster.sh down     stop exactly what `up` started and remove its state
#   tests/local-cluster.sh status   is it up, and where are its logs
#   tests/local-cluster.sh build    only install prerequisites and build/cache the binaries
set -euo pipefail

K8S_DEB_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
K8S_VERSION="v1.20.2"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/pulumi-operator-rs"
BIN_CACHE="$CACHE_ROOT/kubernetes-$K8S_VERSION"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${LOCAL_CLUSTER_DIR:-$REPO_ROOT/.local-cluster}"

log() { echo "local-cluster: $*" >&2; }
die() { echo "local-cluster: ERROR: $*" >&2; exit 1; }

apt_updated=""
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    apt_updated=1
  fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

install_prerequisites() {
  apt_install etcd-server golang-go rsync jq openssl ca-certificates curl git golang-github-modern-go-reflect2-dev iproute2 util-linux
  command -v kubectl >/dev/null || die "kubectl (>= 1.26, with built-in kustomize) is required on PATH"
}

build_kubernetes() {
  if [ -x "$BIN_CACHE/kube-apiserver" ] && [ -x "$BIN_CACHE/kube-controller-manager" ]; then
    return 0
  fi
  install_prerequisites
  local work="$CACHE_ROOT/build-$K8S_VERSION"
  rm -rf "$work"; mkdir -p "$work/lists/partial" "$work/src"
  # A private apt config with a deb-src line for the machine's own bookworm mirror, so nothing
  # global changes.
  local uri
  uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$uri" ] || die "cannot find the Debian mirror URI in /etc/apt/sources.list.d/debian.sources"
  echo "deb-src [trusted=yes] $uri bookworm main" > "$work/sources.list"
  local aptopts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
                 -o "Dir::State::Lists=$work/lists")
  log "fetching Debian's kubernetes source package ($K8S_DEB_VERSION)"
  apt-get "${aptopts[@]}" update -qq >&2
  (cd "$work/src" && apt-get "${aptopts[@]}" source --download-only "kubernetes=$K8S_DEB_VERSION" >&2)
  local orig
  orig=$(ls "$work/src"/kubernetes_*.orig.tar.gz | head -n1)
  mkdir -p "$work/k8s"
  tar xzf "$orig" -C "$work/k8s" --strip-components=1
  # The vendored reflect2 v1.0.1 crashes on Go >= 1.18; Debian ships the fixed v1.0.2.
  rm -rf "$work/k8s/vendor/github.com/modern-go/reflect2"
  mkdir -p "$work/k8s/vendor/github.com/modern-go/reflect2"
  cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go \
     /usr/share/gocode/src/github.com/modern-go/reflect2/*.s "$work/k8s/vendor/github.com/modern-go/reflect2/"
  log "building kube-apiserver and kube-controller-manager (takes ~6 minutes on 2 cores, once)"
  (
    cd "$work/k8s"
    export GOPATH="$work/k8s/.go" CGO_ENABLED=0 GOCACHE="$work/gocache" HOME="$work/home"
    mkdir -p .go/src/k8s.io "$HOME"
    ln -sfn ../../.. .go/src/k8s.io/kubernetes
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >&2
  )
  mkdir -p "$BIN_CACHE"
  cp "$work/k8s/_output/bin/kube-apiserver" "$work/k8s/_output/bin/kube-controller-manager" "$BIN_CACHE/"
  rm -rf "$work"
  log "cached binaries in $BIN_CACHE"
}

case "${1:-}" in
  build) build_kubernetes ;;
  *) echo "usage: $0 up|down|status|build" >&2; exit 2 ;;
esac
