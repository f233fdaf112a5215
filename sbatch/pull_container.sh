#!/bin/bash
# Import the recipe's container image once into shared storage, for every node and every later job.
#   sbatch sbatch/pull_container.sh --runtime pyxis --image REF --cache-dir /shared/containers
# (or set BEAM_CONTAINER_RUNTIME / BEAM_CONTAINER_IMAGE / BEAM_CONTAINER_CACHE_DIR). No GPUs: CPU, network, disk.
#SBATCH --job-name=beam-pull-container
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --time=02:00:00
#SBATCH --output=beam-pull-container-%j.out
#SBATCH --open-mode=append
set -euo pipefail

# Slurm runs a copy of this script from its spool directory, so its own path says nothing about the checkout:
# BEAM_SLURM_HOME if set, else the script's directory when run directly, else the path sbatch was given.
if [[ -z "${BEAM_SLURM_HOME:-}" ]]; then
  script_path="${BASH_SOURCE[0]}"
  if [[ -n "${SLURM_JOB_ID:-}" ]]; then
    script_path="$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | head -n1)"
    [[ "$script_path" == /* ]] || script_path="${SLURM_SUBMIT_DIR:-$PWD}/$script_path"
  fi
  BEAM_SLURM_HOME="$(cd "$(dirname "$script_path")/.." 2>/dev/null && pwd || true)"
fi
if [[ ! -f "$BEAM_SLURM_HOME/stages/pull_container.py" ]]; then
  echo "pull_container.sh: cannot find the beam-slurm checkout (tried '$BEAM_SLURM_HOME'); set BEAM_SLURM_HOME" >&2
  exit 2
fi
export BEAM_SLURM_HOME
python="${BEAM_PYTHON:-$BEAM_SLURM_HOME/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
exec "$python" "$BEAM_SLURM_HOME/stages/pull_container.py" "$@"
