#!/usr/bin/env bash
# The whole test suite on a fresh machine: install everything (apt + venvs), then pytest over tests/.
# The Slurm sandbox is brought up by the tests' session fixture and left running (tools/slurm_sandbox.py down).
#
# Three groups, the sandbox ones one after the other and the third alongside them:
#   whole   the sandbox tests marked whole_cluster (down/up, daemon repair): alone on the sandbox, first;
#   lanes   the other sandbox tests, BEAM_TEST_LANES (3) pytest-xdist workers side by side, each on its own
#           lane of the sandbox (4 nodes and partitions of its own), the longest tests first;
#   semantics  the Slurm-semantics tests (marked slurm_semantics) once more on the Slurm 24.11 sandbox, alongside
#           the lanes (its own cluster), into a log printed at the end; skipped with the reason where the 24.11
#           root could not be built (no Debian 13 packages reachable);
#   other   the tests that do not use the sandbox (mostly computing), into a log printed at the end.
# It ends with each group's wall time and the slowest tests (tools/test_times.py). BEAM_TESTS_SERIAL=1 runs one
# pytest over everything instead, on the whole sandbox. BEAM_TESTS_RECORD_TIMES=1 writes the lane tests' times to
# tests/lane_times.json (the order in which the lanes take them).
# Usage: bash tools/run_tests.sh [pytest args...]   (the same arguments go to every group)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/outside_tmp.sh"
run_outside_tmp "$ROOT" tools/run_tests.sh "$@"
cd "$ROOT"
suite_start=$(date +%s)
# The 24.11 root too (optional for a user's install): the semantics group and the 24.11 sandbox's own tests need it.
export BEAM_SLURM_2411="${BEAM_SLURM_2411:-1}" BEAM_SANDBOX_2411="${BEAM_SANDBOX_2411:-1}"
bash tools/install.sh || { echo "run_tests: install failed" >&2; exit 1; }
install_s=$(( $(date +%s) - suite_start ))
[ "$#" -gt 0 ] || set -- tests
# xunit1: the JUnit XML keeps the lane of each sandbox test (a property) for tools/test_times.py.
PYTEST=(.venv/bin/python -m pytest -ra --timeout=900 -o junit_family=xunit1)
no_tests() {
  # pytest's "no tests collected" is neither success nor failure: say so and fail, so it is never mistaken.
  echo "run_tests: pytest collected no tests$1 (exit 5); treating as a failure" >&2
  exit 1
}

if [ "${BEAM_TESTS_SERIAL:-0}" = 1 ]; then
  "${PYTEST[@]}" "$@"
  rc=$?
  [ "$rc" -eq 5 ] && no_tests ""
  exit "$rc"
fi

lanes="${BEAM_TEST_LANES:-3}"
case "$lanes" in ''|*[!0-9]*|0|1) echo "run_tests: BEAM_TEST_LANES=$lanes: give 2 or more lanes" >&2; exit 2;; esac
export BEAM_SANDBOX_NODES="${BEAM_SANDBOX_NODES:-$(( lanes * 4 ))}"
results="$(mktemp -d /var/tmp/beam-tests-XXXXXX)"
group_times="$results/groups.tsv"

run_group() {  # run_group NAME SLURM_VERSION [pytest arguments...]: one group's pytest, its wall time and exit status
  local name="$1" version="$2" start rc
  shift 2
  start=$(date +%s)
  BEAM_TEST_GROUP="$name" BEAM_SANDBOX_SLURM_VERSION="$version" "${PYTEST[@]}" --junitxml="$results/$name.xml" "$@"
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$(( $(date +%s) - start ))" "$rc" "$version" >>"$group_times"
  return "$rc"
}

run_group other 22.05 -p no:cacheprovider "$@" >"$results/other.log" 2>&1 &
other_pid=$!
trap 'kill "$other_pid" "${semantics_pid:-}" 2>/dev/null' EXIT
echo "================ run_tests: whole-cluster sandbox tests (alone on the sandbox) ================"
run_group whole 22.05 -p no:cacheprovider "$@"
whole_rc=$?
# After the whole-cluster tests: some of them take the 24.11 sandbox down and up.
BEAM_SANDBOX_NODES=4 run_group semantics 24.11 -p no:cacheprovider -v "$@" >"$results/semantics.log" 2>&1 &
semantics_pid=$!
echo "================ run_tests: sandbox tests in $lanes lanes side by side ================"
BEAM_TEST_LANES="$lanes" run_group lanes 22.05 -v -n "$lanes" --dist=loadscope "$@"
lanes_rc=$?
wait "$semantics_pid"
semantics_rc=$?
wait "$other_pid"
other_rc=$?
trap - EXIT
echo
echo "================ run_tests: the Slurm-semantics tests on Slurm 24.11 (run alongside) ================"
cat "$results/semantics.log"
echo
echo "================ run_tests: the tests that do not use the sandbox (run alongside) ================"
cat "$results/other.log"
echo
.venv/bin/python tools/test_times.py --install-s "$install_s" --total-s "$(( $(date +%s) - suite_start ))" \
  --groups "$group_times" ${BEAM_TESTS_RECORD_TIMES:+--record tests/lane_times.json} "$results"/*.xml
echo "run_tests: whole-cluster tests exit $whole_rc, lane tests exit $lanes_rc, Slurm 24.11 semantics tests exit" \
  "$semantics_rc, other tests exit $other_rc"
rm -rf "$results"
codes=("$whole_rc" "$lanes_rc" "$semantics_rc" "$other_rc")
[ "$whole_rc" -eq 5 ] && [ "$lanes_rc" -eq 5 ] && [ "$semantics_rc" -eq 5 ] && [ "$other_rc" -eq 5 ] \
  && no_tests " in any group"
# A group may have nothing to run for the arguments given (exit 5): the others' results are the answer.
for rc in "${codes[@]}"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
