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
export GOMODCACHE="$CACHE_ROOT/go/mod" GOCACHE="$CACHE_ROOT/go/build" CGO_ENABLED=0 GOFLAGS=-mod=readonly
export GOTOOLCHAIN=local
for module in . langhosts; do
  echo "check-go: go vet and go test in tests/tools/$module"
  (cd "$module" && go vet ./... && go test ./...)
done
