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
# The previous release the upgrade test starts from (built once per commit; it builds this
# checkout's binaries again afterwards), then the binaries the cluster runs as images (operator,
# runner).
# A failure here fails the run, but only the upgrade test needs it: the others still run.
status=0
tests/previous-release.sh >/dev/null || status=$?
cargo build --workspace --bins
cargo test --workspace --no-fail-fast "$@" || status=$?
# Least privilege over the whole run: the rights the operator used (the API server's audit log)
# against the rights it is granted. Only after a full run: a partial one uses less.
if [ $# -eq 0 ]; then
  cargo test --test rbac_audit -- --ignored || status=$?
  # helm install/upgrade/uninstall, and the upgrade from the previous release, stop the
  # kustomize-installed operator while they run, so they run alone (one test binary after the
  # other), last.
  cargo test --test helm_install --test helm_upgrade -- --ignored || status=$?
fi
exit $status
