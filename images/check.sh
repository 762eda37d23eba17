#!/usr/bin/env bash
# Checks the images images/build.sh wrote, reading the images themselves (not what they were
# built from): the config runs as the non-root user 65532 with the right entrypoint; the
# merged file system holds the binary, a working `/bin/sh` and `ssh` (git over SSH) and a CA
# bundle; the entrypoint RUNS as the image user inside the image's file system (`chroot
# --userspec` in a mount and PID namespace of its own, no container engine needed); the size stays under a bound. Then lints the
# release workflow (.github/workflows) with actionlint. Prints a table; exits 1 on any failure.
#
#   images/check.sh            (after images/build.sh; root is needed for chroot)
set -euo pipefail
# shellcheck source=images/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MAX_COMPRESSED_MIB="${IMAGES_MAX_COMPRESSED_MIB:-60}"
[ "$(id -u)" = 0 ] || die "run as root: the entrypoint is run inside the image's file system with chroot"
tools="$(image_tools)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
problem() { echo "images: FAIL: $*" >&2; failures=$((failures + 1)); }

# field INFO KEY: one field of ocibuild's inspect output (key=value lines).
field() { sed -n "s/^$2=//p" <<<"$1"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

rows=()
for name in operator runner; do
  tarball="$OUT_DIR/$name.tar"
  [ -s "$tarball" ] || die "$tarball is missing: run images/build.sh first"
  binary="/pulumi-$name"
  info="$("$tools/ocibuild" inspect "$tarball")"
  user="$(field "$info" user)" entrypoint="$(field "$info" entrypoint)"
  layers="$(field "$info" layers)" compressed="$(field "$info" compressedBytes)"
  [ "$user" = "65532:65532" ] || problem "$name: the image user is '$user', not the non-root 65532:65532"
  [ "$entrypoint" = "$binary" ] || problem "$name: the entrypoint is '$entrypoint', not $binary"
  root="$work/$name"
  "$tools/ocibuild" extract "$tarball" "$root"
  [ -x "$root$binary" ] || problem "$name: $binary is not in the image or not executable"
  [ -s "$root/etc/ssl/certs/ca-certificates.crt" ] || problem "$name: no CA bundle"
  grep -q '^nonroot:x:65532:65532:' "$root/etc/passwd" || problem "$name: no passwd entry for 65532"
  if [ "$name" = runner ]; then
    grep -q '^pulumi:x:1000:1000:' "$root/etc/passwd" || problem "runner: no passwd entry for 1000"
  fi
  # What a container runtime provides: /dev/null and a /proc of the process's own.
  mkdir -p "$root/dev" "$root/proc"
  mknod -m 666 "$root/dev/null" c 1 3
  as_user() {
    unshare --mount --pid --fork --mount-proc="$root/proc" \
      chroot --userspec=65532:65532 "$root" "$@"
  }
  # shellcheck disable=SC2016 # expanded by the image's shell
  uid="$(as_user /bin/sh -c 'while read -r k v _; do [ "$k" = Uid: ] && echo "$v"; done </proc/self/status; exit 0')" ||
    problem "$name: /bin/sh does not run in the image"
  [ "$uid" = 65532 ] || problem "$name: processes run as uid '$uid', not 65532"
  ssh_version="$(as_user /usr/bin/ssh -V 2>&1)" || problem "$name: ssh does not run: $ssh_version"
  # The entrypoint itself, as the image user: it prints its help and exits 0.
  if ! out="$(as_user "$binary" --help 2>&1)"; then
    problem "$name: the entrypoint fails as 65532: $out"
  fi
  if [ "$name" = runner ]; then
    out="$(as_user "$binary" version 2>&1)" || problem "runner: '$binary version' fails: $out"
  fi
  rootfs_bytes="$(du -sb "$root" | cut -f1)"
  compressed_mib=$((compressed / 1024 / 1024))
  [ "$compressed_mib" -le "$MAX_COMPRESSED_MIB" ] ||
    problem "$name: $compressed_mib MiB compressed, over the bound of $MAX_COMPRESSED_MIB MiB"
  rows+=("| $name | $(field "$info" tag) | $user | $entrypoint | $layers | $(mib "$compressed") | $(mib "$rootfs_bytes") |")
done

echo "| image | tag | user | entrypoint | layers | compressed | file system |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"

# actionlint checks the workflows' `run:` scripts with shellcheck when it is there.
if ! command -v shellcheck >/dev/null && command -v apt-get >/dev/null; then
  apt-get -qq install -y shellcheck >/dev/null 2>&1 || log "shellcheck unavailable: run: scripts are not linted"
fi
log "linting .github/workflows with actionlint"
(cd "$REPO_ROOT" && "$tools/actionlint" -no-color) || problem "actionlint found problems in .github/workflows"

[ "$failures" -eq 0 ] || die "$failures check(s) failed"
log "all checks passed"
