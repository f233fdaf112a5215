#!/bin/bash
# Build dapo-math-17k-cleaned.parquet, aime-2024-cleaned.parquet and aime-2025-cleaned.parquet as a CPU job.
#   sbatch sbatch/prepare_data.sh data.out_dir=/shared/data/dapo [data.<key>=<value> ...]
# Settings: beam_slurm/data/config.py (out_dir defaults to $DATA_DIR). No GPUs: CPU, hub downloads, disk.
#SBATCH --job-name=beam-prepare-data
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=8G
#SBATCH --time=01:00:00
#SBATCH --output=beam-prepare-data-%j.out
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
if [[ ! -f "$BEAM_SLURM_HOME/stages/prepare_data.py" ]]; then
  echo "prepare_data.sh: cannot find the beam-slurm checkout (tried '$BEAM_SLURM_HOME'); set BEAM_SLURM_HOME" >&2
  exit 2
fi
export BEAM_SLURM_HOME
python="${BEAM_PYTHON:-$BEAM_SLURM_HOME/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
exec "$python" "$BEAM_SLURM_HOME/stages/prepare_data.py" "$@"
