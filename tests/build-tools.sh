#!/usr/bin/env bash
# Builds the real programs the tests run, from the Go modules pinned in tests/tools/go.mod and
# go.sum: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the Pulumi CLI and its
# YAML language host, and Helm (for the chart's tests). They are built once into a cache directory keyed by a hash of the pinned
# module files (so a version change rebuilds, and nothing rebuilds otherwise) and reused.
#
#   tests/build-tools.sh          build what is missing; last line: the directory holding the binaries
#   tests/build-tools.sh --print  print that directory without building (exit 1 if not built yet)
#
# Go modules and Go's build cache live under the same cache root, outside the checkout, so a
# second machine run (or CI on the same machine) downloads and compiles nothing again.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="$REPO_ROOT/tests/tools"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/pulumi-operator-rs"

log() { echo "build-tools: $*" >&2; }
die() { echo "build-tools: ERROR: $*" >&2; exit 1; }

# The Pulumi version is read from go.mod so that `pulumi version` reports what was built (the
# runner gates features on it).
PULUMI_VERSION="$(awk '$1 == "github.com/pulumi/pulumi/pkg/v3" {print $2; exit}' "$TOOLS_DIR/go.mod")"
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$TOOLS_DIR/go.mod")"
[ -n "$PULUMI_VERSION" ] && [ -n "$K8S_VERSION" ] || die "cannot read the pinned versions from $TOOLS_DIR/go.mod"

key="$(cd "$TOOLS_DIR" && cat go.mod go.sum yaml/go.mod yaml/go.sum helm/go.mod helm/go.sum $(find . -type f -name '*.go' | sort) | sha256sum | cut -c1-16)"
BIN_DIR="$CACHE_ROOT/tools-$K8S_VERSION-pulumi-$PULUMI_VERSION-$key/bin"

# Each Go module (a directory under tests/tools) and the commands it builds; a binary is named
# after the last element of its package path.
MODULES=(
  ". ./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler github.com/pulumi/pulumi/pkg/v3/cmd/pulumi ./cmd/pulumi-resource-kubernetes ./cmd/pulumi-resource-standin ./cmd/pulumi-resource-random"
  "yaml github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml"
  "helm helm.sh/helm/v3/cmd/helm"
)
TOOLS=()
for m in "${MODULES[@]}"; do
  for pkg in ${m#* }; do TOOLS+=("${pkg##*/}"); done
done

all_built() {
  local t
  for t in "${TOOLS[@]}"; do [ -x "$BIN_DIR/$t" ] || return 1; done
}

if [ "${1:-}" = "--print" ]; then
  all_built || exit 1
  echo "$BIN_DIR"
  exit 0
fi

if all_built; then
  echo "$BIN_DIR"
  exit 0
fi

# The machines install Go under /usr/local/go; a login shell may not have it on PATH.
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || die "Go (>= 1.26) is required on PATH (it builds the test cluster and the Pulumi CLI)"
go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
[ "${go_minor:-0}" -ge 26 ] || die "Go >= 1.26 is required, found $(go env GOVERSION) at $(command -v go)"

export GOMODCACHE="$CACHE_ROOT/go/mod" GOCACHE="$CACHE_ROOT/go/build" CGO_ENABLED=0 GOFLAGS=-mod=readonly
export GOTOOLCHAIN=local
mkdir -p "$BIN_DIR.partial"
# Version stamps: `pulumi version` and `kube-apiserver --version` report what was built (the
# runner gates features on the Pulumi version). -X of a symbol a binary lacks is ignored.
minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
ldflags="-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
ldflags="$ldflags -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
ldflags="$ldflags -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
for m in "${MODULES[@]}"; do
  dir="${m%% *}" pkgs="${m#* }"
  log "building in tests/tools/$dir: $pkgs"
  start=$SECONDS
  # One invocation per module, so that packages compile in parallel and links overlap.
  # shellcheck disable=SC2086
  (cd "$TOOLS_DIR/$dir" && go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR.partial/" $pkgs)
  log "built in $((SECONDS - start))s"
done
rm -rf "$BIN_DIR"
mv "$BIN_DIR.partial" "$BIN_DIR"
log "tools cached in $BIN_DIR"
# Earlier pins' binaries (about 0.5 GB each) are not needed any more.
for old in "$CACHE_ROOT"/tools-*; do
  [ "$old" = "${BIN_DIR%/bin}" ] || rm -rf "$old"
done
echo "$BIN_DIR"
