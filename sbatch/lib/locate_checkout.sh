# Sourced by every batch script in sbatch/, right after `set -euo pipefail`; not run on its own.
#
# Slurm runs a spool copy of a batch script, so a script's own path says nothing about where the checkout is.
# Each script looks for this file in one place and exits 2 naming BEAM_SLURM_HOME when it is not there:
#   - $BEAM_SLURM_HOME/sbatch/lib/ when BEAM_SLURM_HOME is set (the only way a copy of a script can run);
#   - else inside a batch job, beside the path sbatch was given (`scontrol show job`: Command=; a relative one is
#     relative to the job's working directory), so a script submitted by its path in the checkout finds it;
#   - else (outside Slurm) beside the script itself.
# Here the checkout is this file's grandparent; it must hold the package. Afterwards BEAM_SLURM_HOME is exported (jobs the script starts inherit it)
# and $python is the interpreter to run: $BEAM_PYTHON, else the checkout's .venv, else python3 on PATH.

BEAM_SLURM_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ ! -f "$BEAM_SLURM_HOME/beam_slurm/cli.py" ]]; then
  echo "$(basename "$0"): $BEAM_SLURM_HOME is not a complete beam-slurm checkout; set BEAM_SLURM_HOME to one" >&2
  exit 2
fi
export BEAM_SLURM_HOME
python="${BEAM_PYTHON:-$BEAM_SLURM_HOME/.venv/bin/python}"
command -v "$python" >/dev/null || python="$(command -v python3 || echo python3)"
true  # the scripts source this file on the left of `||`: its status must say "found", whatever the last test gave
