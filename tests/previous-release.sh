#!/usr/bin/env bash
# The previous release of the operator, for the upgrade test (tests/helm_upgrade.rs): the commit
# named in tests/previous-release (a revision of this repository's history), exported with
# `git archive` into the cache and built with this checkout's Cargo build directory (Cargo's
# `build.build-dir`: dependencies and intermediate files), so only the project's own crates
# compile, and a target directory of its own for the binaries: this checkout's
# `release/pulumi-operator` and `release/pulumi-runner`, which the local cluster runs, are never
# replaced, so this can build while tests run. Built once per commit.
#
#   tests/previous-release.sh          build what is missing; last line: the release's directory
#                                      (bin/pulumi-operator, bin/pulumi-runner, chart/)
#   tests/previous-release.sh --print  print that directory without building (exit 1 if not built)
#
# The local cluster maps the images test.local/pulumi-operator-previous and
# test.local/pulumi-runner-previous to $CACHE_ROOT/previous-release/bin (a link to the last one
# built).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/pulumi-operator-rs"
log() { echo "previous-release: $*" >&2; }
die() { echo "previous-release: ERROR: $*" >&2; exit 1; }

revision="$(grep -v '^#' "$REPO_ROOT/tests/previous-release" | awk 'NF {print $1; exit}')"
[ -n "$revision" ] || die "tests/previous-release names no commit"
commit="$(git -C "$REPO_ROOT" rev-parse --verify --quiet "$revision^{commit}")" || {
  # A shallow clone: fetch that commit (or the whole history) from where it came from.
  log "commit $revision is not in this clone; fetching it"
  git -C "$REPO_ROOT" fetch --quiet origin "$revision" 2>/dev/null ||
    git -C "$REPO_ROOT" fetch --quiet --unshallow 2>/dev/null || true
  commit="$(git -C "$REPO_ROOT" rev-parse --verify --quiet "$revision^{commit}")" ||
    die "commit $revision (tests/previous-release) is not in this clone's history and cannot be fetched"
}
out="$CACHE_ROOT/previous-release/$commit"
link="$CACHE_ROOT/previous-release/bin"

built() { [ -x "$out/bin/pulumi-operator" ] && [ -x "$out/bin/pulumi-runner" ] && [ -f "$out/chart/Chart.yaml" ]; }

if [ "${1:-}" = "--print" ]; then
  built || exit 1
  echo "$out"
  exit 0
fi

if ! built; then
  build_dir="$(cd "$REPO_ROOT" && cargo metadata --format-version 1 --no-deps | jq -r '.build_directory // .target_directory')"
  target="$CACHE_ROOT/previous-release/target"
  src="$(mktemp -d)"
  trap 'rm -rf "$src"' EXIT
  git -C "$REPO_ROOT" archive "$commit" | tar -x -C "$src"
  # Cargo tells a workspace's crates apart by their paths inside the workspace and versions:
  # with the same version, the old sources (their files as old as the commit) would count as
  # already built, by this checkout's artifacts. A version of their own keeps them apart.
  sed -i '/^\[workspace.package\]/,/^\[/ s/^version = .*/version = "0.0.0-previous"/' "$src/Cargo.toml"
  grep -q '^version = "0.0.0-previous"' "$src/Cargo.toml" || die "cannot set the previous release's version"
  # This checkout's profiles (they end its Cargo.toml) in place of the release's: a dependency
  # compiled with other settings would not be shared, and a change of profile would compile them
  # all again for the release.
  sed -i '/^\[profile\./,$d' "$src/Cargo.toml"
  sed -n '/^\[profile\./,$p' "$REPO_ROOT/Cargo.toml" >>"$src/Cargo.toml"
  grep -q '^\[profile\.release\.' "$src/Cargo.toml" || die "cannot give the previous release this checkout's profiles"
  # Only the upgrade test runs it: its own crates compiled lightly (package entries leave the
  # dependencies, shared with this checkout's build, as they are).
  cat >>"$src/Cargo.toml" <<'TOML'

[profile.release.package.pulumi-operator]
opt-level = 1

[profile.release.package.pulumi-runner]
opt-level = 0

[profile.release.package.pulumi-operator-api]
opt-level = 1

[profile.release.package.pulumi-gitauth]
opt-level = 0
TOML
  log "building $commit (the previous release) with the build directory $build_dir"
  start=$SECONDS
  # With --workspace, as tests/run.sh builds it: the same features, so no dependency is compiled
  # again; only the two binaries the upgrade test runs.
  (cd "$src" && CARGO_BUILD_BUILD_DIR="$build_dir" CARGO_TARGET_DIR="$target" \
    cargo build --release --workspace --bin pulumi-operator --bin pulumi-runner)
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp/bin"
  cp "$target/release/pulumi-operator" "$target/release/pulumi-runner" "$out.tmp/bin/"
  rm -rf "$target"
  cp -r "$src/charts/pulumi-operator" "$out.tmp/chart"
  echo "$commit" >"$out.tmp/commit"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  log "built in $((SECONDS - start))s"
fi
ln -sfn "$out/bin" "$link.tmp" && mv -T "$link.tmp" "$link"
echo "$out"
