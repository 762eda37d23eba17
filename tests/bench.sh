#!/usr/bin/env bash
# The Stack benchmark (tests/bench.rs says what it measures), on the local test cluster, with
# the release build of the operator and runner:
#
#   tests/bench.sh [N]        N Stacks (default 100); BENCH_* variables tune the phases
#
# Results: target/bench/<time>/{result.json,result.md,latency-cdf.png} (BENCH_OUT to choose).
# BINARY_PROFILE=debug measures the debug build instead. BENCH_INSTALL=0 measures whatever
# operator is installed, untouched.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export BENCH_STACKS="${1:-${BENCH_STACKS:-100}}"
export BINARY_PROFILE="${BINARY_PROFILE:-release}"
profile_flag=()
[ "$BINARY_PROFILE" = release ] && profile_flag=(--release)
# The workspace's binaries (with `-p`, the dependencies would be compiled again with other
# features than the test suite's build).
cargo build "${profile_flag[@]}" --workspace --bins
cluster="$(tests/local-cluster.sh up)"
eval "$(tail -n1 <<<"$cluster")"
export KUBECONFIG
restart_operator() {
  kubectl apply --server-side --force-conflicts -k kustomize/quickstart >/dev/null
  kubectl -n pulumi-operator rollout restart deployment/pulumi-operator >/dev/null
  kubectl -n pulumi-operator rollout status deployment/pulumi-operator --timeout=180s >/dev/null
}
if [ "${BENCH_INSTALL:-1}" = 1 ]; then
  # The operator's pod runs the binaries the image map now names: restart it on them, and put
  # the test suite's release build back afterwards.
  restart_operator
  if [ "$BINARY_PROFILE" != release ]; then
    trap 'BINARY_PROFILE=release tests/local-cluster.sh up >/dev/null && restart_operator' EXIT
  fi
fi
cargo test "${profile_flag[@]}" --workspace --test bench benchmark -- --ignored --nocapture --exact
