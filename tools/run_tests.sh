#!/usr/bin/env bash
# The whole test suite on a fresh machine: install everything (apt + venvs), then pytest over tests/.
# The Slurm sandbox is brought up by the tests' session fixture and left running (tools/slurm_sandbox.py down).
# Two pytest processes run at once: the sandbox tests, which mostly wait on Slurm jobs, print as they go; the others,
# which mostly compute, write to a log that is printed after them. BEAM_TESTS_SERIAL=1 runs one pytest instead.
# Usage: bash tools/run_tests.sh [pytest args...]   (the same arguments go to both processes)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/outside_tmp.sh"
run_outside_tmp "$ROOT" tools/run_tests.sh "$@"
cd "$ROOT"
bash tools/install.sh || { echo "run_tests: install failed" >&2; exit 1; }
[ "$#" -gt 0 ] || set -- tests
PYTEST=(.venv/bin/python -m pytest -ra --timeout=900)
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

other_log="$(mktemp /var/tmp/beam-tests-other-XXXXXX.log)"
BEAM_TEST_GROUP=other "${PYTEST[@]}" -p no:cacheprovider "$@" >"$other_log" 2>&1 &
other_pid=$!
trap 'kill "$other_pid" 2>/dev/null' EXIT
BEAM_TEST_GROUP=sandbox "${PYTEST[@]}" "$@"
sandbox_rc=$?
wait "$other_pid"
other_rc=$?
trap - EXIT
echo
echo "================ run_tests: the tests that do not use the sandbox (run alongside) ================"
cat "$other_log"
rm -f "$other_log"
echo "run_tests: sandbox tests exit $sandbox_rc, other tests exit $other_rc"
[ "$sandbox_rc" -eq 5 ] && [ "$other_rc" -eq 5 ] && no_tests " in either group"
# One group may have nothing to run for the arguments given (exit 5): the other one's result is the answer.
[ "$sandbox_rc" -eq 5 ] && exit "$other_rc"
[ "$other_rc" -eq 5 ] && exit "$sandbox_rc"
[ "$sandbox_rc" -ne 0 ] && exit "$sandbox_rc"
exit "$other_rc"
