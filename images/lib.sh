# shellcheck shell=bash disable=SC2034
# Shared by images/build.sh and images/check.sh: logging, and the ocibuild and actionlint
# binaries, built once from images/ocibuild (its pinned go.mod/go.sum) into a cache directory
# outside the checkout, keyed by a hash of that module.
IMAGES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$IMAGES_DIR/.." && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/pulumi-operator-rs"
OUT_DIR="${IMAGES_OUT:-$REPO_ROOT/target/images}"

log() { echo "images: $*" >&2; }
die() { echo "images: ERROR: $*" >&2; exit 1; }

# Prints the directory holding ocibuild and actionlint, building them when missing.
image_tools() {
  local key dir
  key="$(cd "$IMAGES_DIR/ocibuild" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)"
  dir="$CACHE_ROOT/image-tools-$key"
  if [ ! -x "$dir/ocibuild" ] || [ ! -x "$dir/actionlint" ]; then
    command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
    command -v go >/dev/null || die "Go (>= 1.26) is required on PATH to build images/ocibuild"
    log "building ocibuild and actionlint (images/ocibuild) into $dir"
    (cd "$IMAGES_DIR/ocibuild" &&
      GOMODCACHE="$CACHE_ROOT/go/mod" GOCACHE="$CACHE_ROOT/go/build" GOTOOLCHAIN=local \
        GOFLAGS="-mod=readonly -trimpath -gcflags=all=-dwarf=false" CGO_ENABLED=0 \
        go build -ldflags "-s -w" -o "$dir.partial/" . github.com/rhysd/actionlint/cmd/actionlint) ||
      die "cannot build images/ocibuild"
    rm -rf "$dir" && mv "$dir.partial" "$dir"
  fi
  echo "$dir"
}
