#!/usr/bin/env bash
# The Go code of tests/tools checked as CI checks the Rust code: `go vet` and `go test` of the
# modules that hold code of ours (the root module's providers and helpers, and the Python host
# adapter in langhosts). The other modules only pin third-party tools. Uses the same module and
# build caches as tests/build-tools.sh, so after a tools build it compiles little.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/tools"
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "check-go: Go (>= 1.26) is required on PATH" >&2; exit 1; }
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/pulumi-operator-rs"
# -trimpath as tests/build-tools.sh builds: packages compiled with other flags would not be
# found in the build cache, and a cold machine would compile the tools' dependencies twice.
export GOMODCACHE="$CACHE_ROOT/go/mod" GOCACHE="$CACHE_ROOT/go/build" CGO_ENABLED=0 \
  GOFLAGS="-mod=readonly -trimpath"
export GOTOOLCHAIN=local
for module in . langhosts; do
  echo "check-go: go vet and go test in tests/tools/$module"
  (cd "$module" && go vet ./... && go test ./...)
done
# The provider module shares its compiled packages with the root module only where both name the
# same version (see kubernetes-provider/go.mod): a module the root pins higher than the provider
# does is one that a pin change forgot to lift there (the Pulumi pkg/sdk are the exception).
echo "check-go: tests/tools/kubernetes-provider's shared modules aligned with tests/tools"
list_modules() { (cd "$1" && go list -m -f '{{.Path}} {{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' all); }
behind="$(awk 'NR == FNR { root[$1] = $2; next }
  ($1 in root) && root[$1] != $2 && $1 !~ /^github.com\/pulumi\/pulumi\// { print $1, $2, root[$1] }' \
  <(list_modules .) <(list_modules kubernetes-provider) |
  while read -r module provider root; do
    [ "$(printf '%s\n%s\n' "$provider" "$root" | sort -V | tail -n1)" = "$provider" ] ||
      echo "  $module: $provider in kubernetes-provider, $root in the root module"
  done)"
[ -z "$behind" ] || { echo "check-go: lift these in tests/tools/kubernetes-provider/go.mod:" >&2; echo "$behind" >&2; exit 1; }
