#!/usr/bin/env bash
# Builds Prometheus's `prometheus` server and `promtool` (release 3.16.0, the Go-module version
# v0.316.0 pinned in this directory's go.mod/go.sum).
#
#   tests/tools/prometheus/build.sh OUT_DIR    writes OUT_DIR/prometheus and OUT_DIR/promtool
#
# Built with Prometheus's own `remove_all_sd` tag: the tests scrape static targets only, and the
# cloud service discoveries (AWS, Azure, GCE, Kubernetes, ...) are most of the compile time. The
# web UI's assets are not in the module (upstream builds them with npm), so the server has its
# HTTP API but no UI pages. The version is stamped as upstream's release build does.
#
# Go settings come from the environment (GOMODCACHE, GOCACHE, GOPROXY, ...); nothing in go.mod or
# go.sum is changed (-mod=readonly).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:?usage: $0 OUT_DIR}"
mkdir -p "$OUT"

command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false -trimpath -gcflags=all=-dwarf=false" \
  GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

VERSION=3.16.0
v=github.com/prometheus/common/version
(cd "$HERE" && go build -tags remove_all_sd \
  -ldflags "-s -w -X $v.Version=$VERSION -X $v.Branch=HEAD -X $v.BuildUser=pulumi-operator-rs" \
  -o "$OUT/" github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool)
