#!/usr/bin/env bash
# Runs every test: unit tests, and cluster tests against the local test cluster, which this
# starts when it is not running (tests/local-cluster.sh up; it stays up afterwards). Every test
# binary runs even when an earlier one fails (--no-fail-fast); the exit code is non-zero when any
# test, or the cluster start, failed. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cluster="$(tests/local-cluster.sh up)"
eval "$(tail -n1 <<<"$cluster")"
export KUBECONFIG
# The binaries the cluster runs as images (operator, runner).
cargo build --workspace --bins
cargo test --workspace --no-fail-fast "$@"
