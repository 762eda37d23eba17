#!/usr/bin/env bash
# Fills the krew manifest plugin/krew/pulumi.yaml for a release: the repository, the version and
# the SHA-256 of each archive kubectl-pulumi-<os>-<arch>.tar.gz found in DIST. Fails when an
# archive is missing, so that no placeholder reaches a release.
#
#   plugin/krew/fill-manifest.sh VERSION OWNER/REPO DIST > DIST/pulumi.yaml
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 VERSION OWNER/REPO DIST" >&2; exit 2; }
version="$1" repository="$2" dist="$3"
manifest="$(dirname "${BASH_SOURCE[0]}")/pulumi.yaml"
args=(-e "s|VERSION|${version}|g" -e "s|REPOSITORY|${repository}|g")
for platform in linux-amd64 linux-arm64 darwin-amd64 darwin-arm64; do
  archive="$dist/kubectl-pulumi-${platform}.tar.gz"
  [ -s "$archive" ] || { echo "fill-manifest: $archive is missing" >&2; exit 1; }
  sum="$(sha256sum "$archive" | cut -d' ' -f1)"
  key="SHA256_$(tr 'a-z-' 'A-Z_' <<<"$platform")"
  args+=(-e "s|${key}|${sum}|")
done
filled="$(sed -e '/^#/d' "${args[@]}" "$manifest")"
if grep -qE 'SHA256_|REPOSITORY|: VERSION|/VERSION/' <<<"$filled"; then
  echo "fill-manifest: a placeholder is left" >&2
  exit 1
fi
printf '%s\n' "$filled"
