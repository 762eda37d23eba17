#!/usr/bin/env bash
# Builds the operator and runner images WITHOUT a container engine (no Docker daemon, no
# registry, no base image to pull): the same content as Dockerfile.operator and
# Dockerfile.runner, assembled by images/ocibuild from
#   - a base file system unpacked from Debian bookworm packages (`apt-get download` +
#     `dpkg-deb -x`): a /bin/sh, OpenSSH's client and the libraries they load, CA certificates,
#     and /etc/passwd entries for the image user 65532 (and 1000 in the runner: the uid of Job
#     pods under the `restricted` profile), as the Dockerfiles' useradd lines make them;
#   - the release binary (`cargo build --release --locked`).
# The Dockerfiles link the binaries statically with musl; only the glibc target is installed
# here, so these images carry Debian's glibc (libc6, libgcc-s1) beside the binary instead.
#
#   images/build.sh            both images → target/images/{operator,runner}.tar (docker-archive)
#                              and target/images/{operator,runner}-oci/ (OCI layouts)
#   IMAGES_OUT=DIR IMAGE_VERSION=v1.2.3 IMAGE_REPOSITORY=ghcr.io/me images/build.sh
#
# Load them into a local cluster with `kind load image-archive target/images/operator.tar` or
# `k3d image import target/images/operator.tar` (see docs/operations.md); images/check.sh checks them.
set -euo pipefail
# shellcheck source=images/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  die "apt-get and dpkg-deb are required (a Debian or Ubuntu machine) to assemble the base file system"
fi
command -v cargo >/dev/null || die "cargo is required to build the binaries"

VERSION="${IMAGE_VERSION:-v$(awk -F'"' '/^version = / {print $2; exit}' "$REPO_ROOT/Cargo.toml")}"
REPOSITORY="${IMAGE_REPOSITORY:-ghcr.io/pulumi-operator-rs}"
# The runtime closure of `ssh` and `sh` in bookworm (from `ldd`); images/check.sh runs both in
# the image, so a missing library fails the check. Maintainer-script dependencies (adduser,
# debconf, passwd, perl) are left out: scripts do not run here, this file does their work.
PACKAGES=(libc6 libgcc-s1 dash openssh-client ca-certificates libssl3 zlib1g libselinux1
  libpcre2-8-0 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1)

tools="$(image_tools)"
mkdir -p "$OUT_DIR"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

log "building the release binaries"
start=$SECONDS
# The whole workspace's binaries, as tests/run.sh builds them: with `-p`, Cargo would resolve the
# dependencies' features otherwise and compile a dozen of them again (665 CPU-seconds).
(cd "$REPO_ROOT" && cargo build --release --locked --workspace --bins)
target_dir="$(cd "$REPO_ROOT" && cargo metadata --format-version 1 --no-deps | sed -E 's/.*"target_directory":"([^"]*)".*/\1/')"
log "binaries built in $((SECONDS - start))s"

log "downloading ${#PACKAGES[@]} Debian packages"
mkdir -p "$work/debs"
download() { (cd "$work/debs" && apt-get -qq download "${PACKAGES[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2; exit "${PIPESTATUS[0]}"); }
# A new machine may have no package lists yet: update them once and try again.
download || { apt-get -qq update && download; } || die "apt-get download ${PACKAGES[*]} failed"

# base_rootfs DIR EXTRA_PASSWD_LINE: the unpacked packages plus what their scripts would do.
base_rootfs() {
  local root="$1" extra_user="${2:-}" deb
  mkdir -p "$root"
  for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
  rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug,debconf} "$root"/etc/{init.d,rc*.d,cron*}
  ln -sf dash "$root/bin/sh"
  # update-ca-certificates' bundle, from the certificates the package ships.
  mkdir -p "$root/etc/ssl/certs"
  find "$root/usr/share/ca-certificates" -name '*.crt' | sort | xargs cat >"$root/etc/ssl/certs/ca-certificates.crt"
  mkdir -p "$root/tmp" && chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnonroot:x:65532:65532::/nonexistent:/usr/sbin/nologin\n%s' \
    "$extra_user" >"$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
  if [ -n "$extra_user" ]; then echo 'pulumi:x:1000:' >>"$root/etc/group"; fi
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
}

# image NAME BINARY EXTRA_PASSWD_LINE
image() {
  local name="$1" binary="$2" extra="${3:-}"
  base_rootfs "$work/$name-base" "$extra"
  mkdir -p "$work/$name-app"
  install -m 0755 "$target_dir/release/$binary" "$work/$name-app/$binary"
  "$tools/ocibuild" build --tag "$REPOSITORY/$name:$VERSION" --out "$OUT_DIR/$name.tar" \
    --layout "$OUT_DIR/$name-oci" --entrypoint "/$binary" --user 65532:65532 \
    --env PATH=/usr/local/bin:/usr/bin:/bin --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --label "org.opencontainers.image.title=pulumi-operator-rs $name" \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.source=https://github.com/pulumi-operator-rs/pulumi-operator-rs" \
    --layer "$work/$name-base" --layer "$work/$name-app"
}

image operator pulumi-operator
image runner pulumi-runner 'pulumi:x:1000:1000::/nonexistent:/usr/sbin/nologin
'
log "wrote $OUT_DIR/operator.tar and $OUT_DIR/runner.tar (and OCI layouts beside them)"
