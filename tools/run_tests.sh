#!/usr/bin/env bash
# The whole test suite on a fresh machine: install everything (apt + venvs), then pytest over tests/.
# The Slurm sandbox is brought up by the tests' session fixture and left running (tools/slurm_sandbox.py down).
# Usage: bash tools/run_tests.sh [pytest args...]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/outside_tmp.sh"
run_outside_tmp "$ROOT" tools/run_tests.sh "$@"
cd "$ROOT"
bash tools/install.sh || { echo "run_tests: install failed" >&2; exit 1; }
.venv/bin/python -m pytest -ra --timeout=900 "${@:-tests}"
rc=$?
if [ "$rc" -eq 5 ]; then
  # pytest's "no tests collected" is neither success nor failure: say so and fail, so it is never mistaken.
  echo "run_tests: pytest collected no tests (exit 5); treating as a failure" >&2
  exit 1
fi
exit "$rc"
