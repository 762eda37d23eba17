#!/usr/bin/env bash
# Runs every test: unit tests, and cluster tests against the local test cluster, which this
# starts when it is not running (tests/local-cluster.sh up; it stays up afterwards). Every test
# binary runs even when an earlier one fails; the exit code is non-zero when any test, or the
# cluster start, failed.
#
#   tests/run.sh               everything: first, one after the other, the test binaries that
#                              kill or scale the operator or fault the control plane (the other
#                              test binaries, the doc tests and the previous release build
#                              meanwhile); then the others, TEST_LANES (3) at a time, longest
#                              first; last, alone, the least-privilege check and the Helm install
#                              and the upgrade from the previous release. Each
#                              binary's output is in target/test-logs/<package>-<test>.log; a
#                              failed binary's output is printed whole.
#   tests/run.sh ARGS...       `cargo test --release --workspace --no-fail-fast ARGS...`, one
#                              binary after the other, without the final least-privilege and Helm
#                              checks (e.g. `tests/run.sh --test e2e_s3`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Everything in the release profile: the binaries the cluster runs as images (operator, runner)
# are those the images ship, and one build of the dependencies serves them and the tests (the
# test code itself is compiled lightly: Cargo.toml's profiles). BINARY_PROFILE=debug runs the
# debug build instead.
export BINARY_PROFILE="${BINARY_PROFILE:-release}"
profile=()
[ "$BINARY_PROFILE" = release ] && profile=(--release)
cluster="$(tests/local-cluster.sh up)"
eval "$(tail -n1 <<<"$cluster")"
export KUBECONFIG
status=0
cargo build "${profile[@]}" --workspace --bins
if [ $# -gt 0 ]; then
  # The previous release the upgrade test starts from (built once per commit). A failure here
  # fails the run, but only the upgrade test needs it: the others still run.
  tests/previous-release.sh >/dev/null || status=$?
  cargo test "${profile[@]}" --workspace --no-fail-fast "$@" || status=$?
  exit $status
fi

# Test binaries that run alone, in this order: e2e_hostile counts the operator's reconciles over a
# quiet minute (other tests' Stacks would count too); the others stop the operator (kill, scale)
# or the API server and etcd under it, or throttle its requests (e2e_throttled).
SERIAL="pulumi-operator-tests:e2e_hostile pulumi-operator-tests:e2e_chaos
  pulumi-operator-tests:e2e_exactly_once pulumi-operator-tests:install
  pulumi-operator-tests:e2e_faults pulumi-operator-tests:e2e_throttled"
# Run last, --ignored, alone: least privilege over the whole run (the API server's audit log: the
# rights the operator used against those it is granted; a partial run uses less), then the Helm
# install and the upgrade from the previous release.
LAST="pulumi-operator-tests:rbac_audit pulumi-operator-tests:helm_install
  pulumi-operator-tests:helm_upgrade"
# The rest run side by side, the longest first so that the lanes end together (the ones not
# named here, short, follow in any order).
LONGEST_FIRST="pulumi-operator-tests:e2e_programs pulumi-operator-tests:e2e_policy
  pulumi-operator-tests:e2e_bypass pulumi-operator-tests:e2e_pulumi pulumi-operator-tests:e2e_s3 pulumi-operator-tests:e2e
  pulumi-operator-tests:e2e_workspace pulumi-operator-tests:e2e_sources
  pulumi-operator-tests:e2e_suspend pulumi-operator-tests:e2e_fields pulumi-runner:run
  pulumi-runner:workspace pulumi-operator-tests:e2e_plugin pulumi-operator-tests:monitoring"
export TEST_LOGS="$PWD/target/test-logs"
rm -rf "$TEST_LOGS"; mkdir -p "$TEST_LOGS"

# Test executables: "<package>:<target> <package directory> <executable>", built as needed.
# Always with --workspace, so that every build resolves the dependencies' features alike and
# compiles none of them twice.
executables() {
  cargo test "${profile[@]}" --workspace --no-run --message-format=json "$@" 2>>"$TEST_LOGS/build.log" | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        source, _, fragment = m["package_id"].partition("#")
        pkg = fragment.split("@")[0] if "@" in fragment else source.rstrip("/").rsplit("/", 1)[-1]
        name = m["target"]["name"] if m["target"]["kind"] == ["test"] else m["target"]["name"] + "-unit"
        print(pkg + ":" + name, os.path.dirname(m["manifest_path"]), m["executable"])
'
}
# First only the binaries that run alone; the others (most of the compile time of this project's
# own code on a new machine), the doc tests and the previous release the upgrade test starts
# from build beside them, which mostly wait on faults. The previous release has a target
# directory of its own: the binaries the cluster runs are never replaced under it.
serial_targets=()
for key in $SERIAL; do serial_targets+=(--test "${key#*:}"); done
executables "${serial_targets[@]}" >"$TEST_LOGS/binaries" ||
  { cat "$TEST_LOGS/build.log" >&2; exit 1; }
# Below the tests' priority (they time recoveries), the test binaries before the previous release,
# which only the last test needs.
(
  renice -n 10 -p "$BASHPID" >/dev/null
  executables >"$TEST_LOGS/binaries.all" || { cat "$TEST_LOGS/build.log"; exit 1; }
  cargo test "${profile[@]}" --workspace --doc >"$TEST_LOGS/doc.log" 2>&1 || { cat "$TEST_LOGS/doc.log"; exit 1; }
) >"$TEST_LOGS/build-beside.log" 2>&1 &
build_beside=$!
(
  renice -n 10 -p "$BASHPID" >/dev/null
  while kill -0 "$build_beside" 2>/dev/null; do sleep 5; done
  tests/previous-release.sh
) >"$TEST_LOGS/previous-release.log" 2>&1 &
previous_release=$!

# "<package>:<target> [args]" → runs that binary from its package's directory (as cargo does),
# its output to its log; prints one line when it passed, its whole output when it failed.
run_binary() {
  local key="${1%% *}" args="" dir exe log start=$SECONDS rc=0
  [ "$key" = "$1" ] || args="${1#* }"
  read -r _ dir exe < <(grep "^$key " "$TEST_LOGS/binaries")
  [ -n "${exe:-}" ] || { echo "tests/run.sh: no test binary $key" >&2; return 1; }
  log="$TEST_LOGS/${key/:/-}.log"
  # shellcheck disable=SC2086
  (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe" $args) >"$log" 2>&1 </dev/null || rc=$?
  {
    flock -x 9
    if [ $rc = 0 ]; then
      echo "test binary $key: ok in $((SECONDS - start))s ($(grep '^test result' "$log" | tail -n1))"
    else
      echo "test binary $key: FAILED (exit $rc) after $((SECONDS - start))s; its output:"
      # Without the backtraces' frames, which say nothing a reader of CI output needs.
      grep -Ev '^ +([0-9]+: |at )' "$log" | sed 's/^/    /'
      echo "$key" >>"$TEST_LOGS/failed"
    fi
  } 9>"$TEST_LOGS/.print-lock"
  return $rc
}
export -f run_binary

phase=$SECONDS
for key in $SERIAL; do run_binary "$key" || status=1; done
echo "tests/run.sh: the binaries that run alone took $((SECONDS - phase))s"
phase=$SECONDS
if ! wait "$build_beside"; then
  cat "$TEST_LOGS/build-beside.log"
  echo "tests/run.sh: the other test binaries or the doc tests did not build or pass" >&2
  status=1
fi
echo "tests/run.sh: waited $((SECONDS - phase))s for the other test binaries"
[ ! -s "$TEST_LOGS/binaries.all" ] || cp "$TEST_LOGS/binaries.all" "$TEST_LOGS/binaries"
side_by_side=()
for key in $LONGEST_FIRST; do side_by_side+=("$key"); done
# The lists span lines: compared as words (a key before a line break once ran twice, the second
# time beside other tests, which it disturbed by killing the operator).
# shellcheck disable=SC2086
named=" $(echo $SERIAL $LAST) ${side_by_side[*]} "
while read -r key _; do
  case "$named" in *" $key "*) ;; *) side_by_side+=("$key"); named="$named$key " ;; esac
done <"$TEST_LOGS/binaries"
# The tools that only the binaries side by side need, when a build of them is under way (.ci/run
# builds them beside the first binaries, which mostly wait on faults).
phase=$SECONDS
tests/build-tools.sh --print pulumi-resource-kubernetes >/dev/null ||
  echo "tests/run.sh: the Kubernetes provider is not built (tests/build-tools.sh)" >&2
echo "tests/run.sh: waited $((SECONDS - phase))s for the Kubernetes provider"
# The `pulumi/pulumi` image holds the provider plugins there were at `up`: add it.
tests/local-cluster.sh up >/dev/null || status=$?
phase=$SECONDS
printf '%s\n' "${side_by_side[@]}" | xargs -d '\n' -P "${TEST_LANES:-3}" -n1 bash -c 'run_binary "$1"' _ ||
  status=1
echo "tests/run.sh: the binaries side by side took $((SECONDS - phase))s"
phase=$SECONDS
if ! wait "$previous_release"; then
  tail -n 30 "$TEST_LOGS/previous-release.log"
  echo "tests/run.sh: the previous release did not build (the upgrade test needs it)" >&2
  status=1
fi
echo "tests/run.sh: waited $((SECONDS - phase))s for the previous release"
phase=$SECONDS
for key in $LAST; do run_binary "$key --ignored" || status=1; done
echo "tests/run.sh: the last binaries took $((SECONDS - phase))s"
# The failures again, in short, at the end, where a reader of a long run's output looks first.
if [ -s "$TEST_LOGS/failed" ]; then
  echo "tests/run.sh: what failed (the whole outputs are above and in $TEST_LOGS):"
  while read -r key; do
    echo "== $key"
    tests/failure-digest.py "$TEST_LOGS/${key/:/-}.log" | sed 's/^/    /'
  done <"$TEST_LOGS/failed"
fi
exit $status
