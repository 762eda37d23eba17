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
# -trimpath and no DWARF as tests/build-tools.sh builds: packages compiled with other flags would
# not be found in the build cache, and a cold machine would compile the tools' dependencies twice.
export GOMODCACHE="$CACHE_ROOT/go/mod" GOCACHE="$CACHE_ROOT/go/build" CGO_ENABLED=0 \
  GOFLAGS="-mod=readonly -trimpath -gcflags=all=-dwarf=false"
export GOTOOLCHAIN=local
for module in . langhosts; do
  echo "check-go: go vet and go test in tests/tools/$module"
  (cd "$module" && go vet ./... && go test ./...)
done
# A tool module shares its compiled packages with the root module only where both name the same
# version of every module below them (see kubernetes-provider/go.mod), so every module the tool
# modules share is pinned at one version: the newest any of them needs, named in the root module
# (whose go.mod lists it) and lifted to in the others. The exceptions: the Pulumi pkg/sdk (each
# tool is built against its own release), and a module's own replace lines (the sdk's x/text pin).
echo "check-go: the tool modules' shared dependencies aligned with tests/tools"
module_format='{{.Path}} {{if .Replace}}{{.Replace.Version}} replaced{{else}}{{.Version}}{{end}}'
# The modules whose packages a tool module builds (its tools.go names them; the tags are
# Prometheus's build.sh's), each once.
list_modules() {
  (cd "$1" && go list -e -deps -tags tools,remove_all_sd -f "{{with .Module}}$module_format{{end}}" . | sort -u)
}
root_modules="$(go list -m -f "$module_format" all)"
# The modules whose packages the root module builds (the others are only in its module graph).
root_built="$(list_modules .)"
# Modules the root module cannot take at a tool module's newer version: the Pulumi CLI v3.259.0
# does not compile against Prometheus's libopenapi v0.41 (it moved to github.com/pb33f/go-yaml),
# nor against the jsonpath v0.8.4 that goes with it. Only Prometheus uses those packages.
newer_allowed=" github.com/pb33f/libopenapi github.com/pb33f/jsonpath "
unaligned=""
for module in kubernetes-provider yaml langhosts langhost-go seaweedfs prometheus; do
  unaligned="$unaligned$(awk 'NR == FNR { root[$1] = $2; replaced[$1] = $3; next }
    ($1 in root) && root[$1] != $2 && $3 != "replaced" && replaced[$1] != "replaced" && $1 !~ /^github.com\/pulumi\/pulumi\// { print $1, $2, root[$1] }' \
    <(echo "$root_modules") <(list_modules "$module") |
    while read -r dep theirs root; do
      if [ "$(printf '%s\n%s\n' "$theirs" "$root" | sort -V | tail -n1)" = "$theirs" ]; then
        case "$newer_allowed" in *" $dep "*) continue ;; esac
        grep -q "^$dep " <<<"$root_built" || continue
        printf '  %s: %s in tests/tools/%s, %s in the root module: go get %s@%s in tests/tools, then lift the other modules\n' \
          "$dep" "$theirs" "$module" "$root" "$dep" "$theirs"
      else
        printf '  %s: %s in tests/tools/%s, %s in the root module: go get %s@%s in tests/tools/%s\n' \
          "$dep" "$theirs" "$module" "$root" "$dep" "$root" "$module"
      fi
    done)
"
done
unaligned="$(echo "$unaligned" | sed '/^$/d')"
[ -z "$unaligned" ] || { echo "check-go: align these versions (then go mod tidy):" >&2; echo "$unaligned" >&2; exit 1; }
