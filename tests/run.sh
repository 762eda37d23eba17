#!/usr/bin/env bash
# Runs every test: unit tests, and cluster tests against the local test cluster, which this
# starts when it is not running (tests/local-cluster.sh up; it stays up afterwards).
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
eval "$(tests/local-cluster.sh up | tail -n1)"
export KUBECONFIG
# The binaries the cluster runs as images (operator, runner, the Pulumi CLI stand-in).
cargo build --workspace --bins
cargo test --workspace "$@"
