#!/usr/bin/env bash
# Builds the real Pulumi Kubernetes provider plugin, pulumi-resource-kubernetes (release v4.25.0 of
# github.com/pulumi/pulumi-kubernetes), and Helm's CLI, from the modules pinned in this directory's
# go.mod/go.sum (see there for why they are one module, aligned with ../go.mod).
#
#   tests/tools/kubernetes-provider/build.sh OUT_DIR    writes OUT_DIR/pulumi-resource-kubernetes
#                                                       and OUT_DIR/helm
#
# The provider's main package embeds schema-embed.json and terraform-mapping-embed.json, which are
# not in the module: upstream's `make k8sprovider` writes them with `VERSION=... go generate` (the
# package's generate.go: it sets the schema's "version" and re-serialises both JSON files compactly).
# The module cache is read-only, so this script copies that package next to a copy of this
# module's go.mod/go.sum in a temporary directory, runs generate.go there exactly as upstream does,
# and builds the copy. The provider module itself is copied there too, with the one import that the
# Kubernetes libraries v0.37 moved (structured-merge-diff v4 → v6, in pkg/await/await.go) changed,
# and used through a replace line of the copy's go.mod; nothing else in it is touched. The version is
# stamped both into the schema and into pkg/version.Version (what the plugin reports to the CLI),
# as upstream's release build does (its .goreleaser.yml: -s -w -X .../pkg/version.Version).
#
# Go settings come from the environment (GOMODCACHE, GOCACHE, GOPROXY, ...); nothing in go.mod or
# go.sum is changed (-mod=readonly): on a fresh machine the modules download through the proxy.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:?usage: $0 OUT_DIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# The provider commit f47bc2d6 is the one upstream tagged v4.25.0.
VERSION=4.25.0
PROVIDER=github.com/pulumi/pulumi-kubernetes/provider/v4

command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
# -trimpath for the generator too: it then reuses the packages it shares with the plugin (the
# Pulumi SDK and its dependencies) instead of compiling them a second time.
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false -trimpath -gcflags=all=-dwarf=false" \
  GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

build="$(mktemp -d "${TMPDIR:-/tmp}/kubernetes-provider.XXXXXX")"
trap 'rm -rf "$build"' EXIT
cp "$HERE/go.mod" "$HERE/go.sum" "$build/"
# The provider module's directory in the module cache (downloaded if missing).
src="$(cd "$build" && go mod download -json "$PROVIDER" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[ -d "$src/cmd/pulumi-resource-kubernetes" ] || { echo "build.sh: no $PROVIDER in the module cache" >&2; exit 1; }
mkdir -p "$build/cmd"
cp -R "$src/cmd/pulumi-resource-kubernetes" "$build/cmd/"
cp -R "$src" "$build/provider"
chmod -R u+w "$build/cmd" "$build/provider"
smd_old='"sigs.k8s.io/structured-merge-diff/v4/fieldpath"'
grep -q "$smd_old" "$build/provider/pkg/await/await.go" \
  || { echo "build.sh: $smd_old is no longer in pkg/await/await.go: review the patch" >&2; exit 1; }
sed -i "s#$smd_old#\"sigs.k8s.io/structured-merge-diff/v6/fieldpath\"#" "$build/provider/pkg/await/await.go"
(cd "$build" && go mod edit -replace="$PROVIDER=./provider")
(cd "$build/cmd/pulumi-resource-kubernetes" && VERSION="$VERSION" go run generate.go)
# One invocation for both, so the packages they share compile once.
(cd "$build" && go build \
  -ldflags "-s -w -X $PROVIDER/pkg/version.Version=$VERSION" \
  -o "$OUT/" ./cmd/pulumi-resource-kubernetes helm.sh/helm/v3/cmd/helm)
