#!/usr/bin/env bash
# Runs every test: unit tests, and cluster tests against the local test cluster, which this
# starts when it is not running (tests/local-cluster.sh up; it stays up afterwards). Every test
# binary runs even when an earlier one fails (--no-fail-fast); the exit code is non-zero when any
# test, or the cluster start, failed. Extra arguments go to `cargo test` (and skip the final
# least-privilege check, which needs a whole run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cluster="$(tests/local-cluster.sh up)"
eval "$(tail -n1 <<<"$cluster")"
export KUBECONFIG
# The binaries the cluster runs as images (operator, runner).
cargo build --workspace --bins
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?
# Least privilege over the whole run: the rights the operator used (the API server's audit log)
# against the rights it is granted. Only after a full run: a partial one uses less.
if [ $# -eq 0 ]; then
  cargo test --test rbac_audit -- --ignored || status=$?
  # helm install/upgrade/uninstall stops the kustomize-installed operator while it runs, so it
  # runs alone, last.
  cargo test --test helm_install -- --ignored || status=$?
fi
exit $status
