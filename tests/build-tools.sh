#!/usr/bin/env bash
# Builds the real programs the tests run, from the Go modules pinned in tests/tools (each
# directory with a go.mod is a module with its own go.sum):
#   .                    etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the Pulumi
#                        CLI, and the test-only `random` and `standin` provider plugins
#   yaml                 the Pulumi YAML language host
#   langhosts            the Pulumi Node.js and Python language hosts, each behind a test adapter
#                        (see there), with the sdk's scripts they run (pulumi-language-python-exec,
#                        and pulumi-analyzer-policy{,-python} for policy packs)
#   langhost-go          the Pulumi Go language host
#   kubernetes-provider  the real Pulumi Kubernetes provider, and Helm (for the chart's tests),
#                        aligned with the root module's versions (its own build.sh)
#   seaweedfs            SeaweedFS's `weed`, a real S3 server (state backends in s3://)
#   prometheus           Prometheus's `prometheus` and `promtool` (the alerting rules' and the
#                        dashboard's tests; its own build.sh)
# Each module is built once into a cache directory keyed by a hash of its pinned files (so a
# version change rebuilds that module only, and nothing rebuilds otherwise); the tools directory
# holds links to every module's binaries.
#
#   tests/build-tools.sh               build what is missing; last line: the directory holding
#                                      the binaries
#   BUILD_TOOLS_LATER=1 tests/build-tools.sh
#                                      the same, but the modules only some later tests need
#                                      (kubernetes-provider, seaweedfs, prometheus) are left for a
#                                      later call without it: .ci/run builds them beside the
#                                      first tests
#   BUILD_TOOLS_ONE_LANE=1 tests/build-tools.sh
#                                      one module after the other, in the order below (beside
#                                      tests, which keep the other core busy: the first module
#                                      missing is ready soonest)
#   tests/build-tools.sh --print       print that directory without building (exit 1 if not
#                                      everything is built)
#   tests/build-tools.sh --print TOOL  print it once TOOL is there, waiting while a build is under
#                                      way (exit 1 if TOOL is not built and no build is under way)
#
# Go modules and Go's build cache live under the same cache root, outside the checkout, so a
# second machine run (or CI on the same machine) downloads and compiles nothing again. Modules
# build in two lanes at once (a Go build spends long stretches linking one big binary on one
# core): the root module and then kubernetes-provider, which reuses most of what the root module
# compiled (run side by side, both would compile those packages); and the others in the second.
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

# Each module (a directory under tests/tools), and the packages it builds; a binary is named
# after the last element of its package path. `-` marks a module built by its own build.sh.
MODULES=(
  ". ./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler github.com/pulumi/pulumi/pkg/v3/cmd/pulumi ./cmd/pulumi-resource-standin ./cmd/pulumi-resource-random"
  "kubernetes-provider - pulumi-resource-kubernetes helm"
  "yaml github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml"
  "langhosts ./cmd/pulumi-language-nodejs ./cmd/pulumi-language-python"
  "langhost-go github.com/pulumi/pulumi/sdk/v3/go/pulumi-language-go"
  "seaweedfs github.com/seaweedfs/seaweedfs/weed"
  "prometheus - prometheus promtool"
)

module_key() { # dir → hash of the module's pinned files and sources
  local dir="$1" files
  if [ "$dir" = . ]; then
    files="$(cd "$TOOLS_DIR" && { echo go.mod go.sum tools.go; find cmd internal -type f -name '*.go' | sort; })"
  else
    files="$(cd "$TOOLS_DIR" && find "$dir" -type f | sort)"
  fi
  # shellcheck disable=SC2086
  (cd "$TOOLS_DIR" && { echo "$PULUMI_VERSION $K8S_VERSION $(go_version)"; cat $files; } | sha256sum | cut -c1-16)
}
go_version() { command -v go >/dev/null && go env GOVERSION 2>/dev/null || echo none; }

module_tools() { # module line → binary names
  local m="$1" pkg
  set -- $m; shift
  if [ "$1" = - ]; then shift; echo "$@"; return; fi
  for pkg in "$@"; do printf '%s ' "${pkg##*/}"; done
}

module_out() { # module line → its cache directory
  local dir="${1%% *}"
  local name="${dir//\//-}"; [ "$name" = . ] && name=root
  echo "$CACHE_ROOT/modules/$name-$(module_key "$dir")"
}

# The machines install Go under /usr/local/go; a login shell may not have it on PATH.
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"

combined=""
for m in "${MODULES[@]}"; do combined="$combined $(module_out "$m")"; done
BIN_DIR="$CACHE_ROOT/tools-$K8S_VERSION-pulumi-$PULUMI_VERSION-$(echo "$combined" | sha256sum | cut -c1-16)/bin"

# Modules that only some tests need, which tests/run.sh runs after those that fault the cluster
# (the Kubernetes provider: e2e_programs, e2e_policy, e2e_pulumi, e2e_s3; SeaweedFS: e2e_s3;
# Prometheus: monitoring, e2e_prometheus; Helm, beside the provider: the chart's tests):
# BUILD_TOOLS_LATER=1 leaves them out.
LATE_MODULES=" kubernetes-provider seaweedfs prometheus "
SELECTED=()
for m in "${MODULES[@]}"; do
  case "$LATE_MODULES" in
    *" ${m%% *} "*) [ "${BUILD_TOOLS_LATER:-0}" = 1 ] || SELECTED+=("$m") ;;
    *) SELECTED+=("$m") ;;
  esac
done

all_built() { # module lines → whether each one's binaries are in BIN_DIR
  local m t
  for m in "$@"; do
    for t in $(module_tools "$m"); do [ -x "$BIN_DIR/$t" ] || return 1; done
  done
}

# Held by a build while it runs; `--print TOOL` waits on it.
mkdir -p "$CACHE_ROOT"
LOCK="$CACHE_ROOT/build-tools.lock"

if [ "${1:-}" = "--print" ]; then
  if [ -n "${2:-}" ]; then
    # Each module's binaries appear as soon as it is built: wait for this one while a build
    # holds the lock (for up to an hour), and give up once no build is under way.
    exec 9>"$LOCK"
    waited=0
    until [ -x "$BIN_DIR/$2" ]; do
      if flock -s -n 9; then
        [ -x "$BIN_DIR/$2" ] || exit 1
        break
      fi
      [ "$waited" -lt 3600 ] || exit 1
      sleep 2; waited=$((waited + 2))
    done
  else
    all_built "${MODULES[@]}" || exit 1
  fi
  echo "$BIN_DIR"
  exit 0
fi

if all_built "${SELECTED[@]}"; then
  echo "$BIN_DIR"
  exit 0
fi
exec 9>"$LOCK"
flock -x 9

command -v go >/dev/null || die "Go (>= 1.26) is required on PATH (it builds the test cluster and the Pulumi CLI)"
go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
[ "${go_minor:-0}" -ge 26 ] || die "Go >= 1.26 is required, found $(go env GOVERSION) at $(command -v go)"

# No DWARF from the compiler: the binaries are linked with -s -w, which drops it anyway, and not
# writing it takes 12-18 % of the compile CPU (measured on the YAML host from an empty build
# cache). tests/check-go.sh and the modules' build.sh use the same flags, so that they find these
# packages in the build cache. The binaries do not change, so the flags are not part of a module's
# cache key.
export GOMODCACHE="$CACHE_ROOT/go/mod" GOCACHE="$CACHE_ROOT/go/build" CGO_ENABLED=0 \
  GOFLAGS="-mod=readonly -trimpath -gcflags=all=-dwarf=false"
export GOTOOLCHAIN=local
# Version stamps: `pulumi version` and `kube-apiserver --version` report what was built (the
# runner gates features on the Pulumi version). -X of a symbol a binary lacks is ignored.
minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
ldflags="-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
ldflags="$ldflags -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
ldflags="$ldflags -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"

build_module() { # module line → builds into its cache directory unless already there
  local m="$1" dir="${1%% *}" pkgs="${1#* }" out start sdk_version flags="$ldflags"
  out="$(module_out "$m")"
  [ -f "$out/.built" ] && return 0
  rm -rf "$out.partial"; mkdir -p "$out.partial"
  start=$SECONDS
  log "building tests/tools/$dir"
  if [ "${pkgs%% *}" = - ]; then
    "$TOOLS_DIR/$dir/build.sh" "$out.partial"
  else
    # The language hosts report their own sdk version (the CLI shows it in `pulumi about`).
    flags="$ldflags"
    case "$dir" in langhost*)
      sdk_version="$(awk '$1 == "github.com/pulumi/pulumi/sdk/v3" {print $2; exit}' "$TOOLS_DIR/$dir/go.mod")"
      flags="-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$sdk_version" ;;
    esac
    # One invocation per module, so that packages compile in parallel and links overlap.
    # shellcheck disable=SC2086
    (cd "$TOOLS_DIR/$dir" && go build -ldflags "$flags" -o "$out.partial/" $pkgs)
  fi
  if [ "$dir" = langhosts ]; then
    # The real hosts, behind the test adapters ./cmd/pulumi-language-{nodejs,python} (see
    # ./internal/adapter), and the scripts (from the same sdk release) that the Python host runs
    # to start a program and the adapters run to start a policy pack.
    (cd "$TOOLS_DIR/$dir" && go build -ldflags "$flags" -o "$out.partial/pulumi-language-nodejs-host" \
      github.com/pulumi/pulumi/sdk/v3/nodejs/cmd/pulumi-language-nodejs)
    (cd "$TOOLS_DIR/$dir" && go build -ldflags "$flags" -o "$out.partial/pulumi-language-python-host" \
      github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python)
    local sdk; sdk="$(cd "$TOOLS_DIR/$dir" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)"
    install -m 0755 "$sdk/python/cmd/pulumi-language-python-exec" "$sdk/nodejs/dist/pulumi-analyzer-policy" \
      "$sdk/python/dist/pulumi-analyzer-policy-python" "$out.partial/"
  fi
  touch "$out.partial/.built"
  rm -rf "$out"; mv "$out.partial" "$out"
  link_module "$m"
  log "built tests/tools/$dir in $((SECONDS - start))s"
}

# The directory's name is keyed by every module's pins, so a binary there never changes: a
# module's binaries are added in place as soon as it is built (tests may be using the others, or
# waiting for these with --print TOOL), each under a temporary name first so that a waiting
# `--print TOOL` never sees half a file.
link_module() { # module line → its built binaries linked into BIN_DIR
  local out f name
  out="$(module_out "$1")"
  mkdir -p "$BIN_DIR"
  for f in "$out"/*; do
    name="${f##*/}"
    [ -e "$BIN_DIR/$name" ] && continue
    ln -f "$f" "$BIN_DIR/.$name.tmp" 2>/dev/null || cp -p "$f" "$BIN_DIR/.$name.tmp"
    mv -f "$BIN_DIR/.$name.tmp" "$BIN_DIR/$name"
  done
}

mkdir -p "$CACHE_ROOT/modules"
build_lane() { # module lines → builds them one after the other; fails if any failed
  local m status=0
  # Each in the background, where errexit holds (it does not in a `|| status=1` context).
  for m in "$@"; do build_module "$m" & wait $! || status=1; done
  return $status
}
lane_shared=() lane_other=()
for m in "${SELECTED[@]}"; do
  case "${BUILD_TOOLS_ONE_LANE:-0}:${m%% *}" in
    1:* | *:. | *:kubernetes-provider) lane_shared+=("$m") ;;
    *) lane_other+=("$m") ;;
  esac
done
build_lane "${lane_shared[@]}" &
shared_pid=$!
build_lane "${lane_other[@]}" &
other_pid=$!
failed=0
wait "$shared_pid" || failed=1
wait "$other_pid" || failed=1
# Name each module that did not build.
for m in "${SELECTED[@]}"; do
  [ -f "$(module_out "$m")/.built" ] || { log "tests/tools/${m%% *} did not build"; failed=1; }
done
[ "$failed" = 0 ] || die "some tools did not build (see above)"

# Modules built by an earlier call (under earlier pins' directory) are linked here too.
for m in "${SELECTED[@]}"; do link_module "$m"; done
log "tools cached in $BIN_DIR"
# Earlier pins' binaries (about 0.5 GB each) are not needed any more.
keep=" $combined "
for old in "$CACHE_ROOT"/tools-*; do
  [ "$old" = "${BIN_DIR%/bin}" ] || rm -rf "$old"
done
for old in "$CACHE_ROOT"/modules/*; do
  case "$keep" in *" $old "*) ;; *) rm -rf "$old" ;; esac
done
echo "$BIN_DIR"
