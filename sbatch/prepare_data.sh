#!/bin/bash
# Build dapo-math-17k-cleaned.parquet, aime-2024-cleaned.parquet and aime-2025-cleaned.parquet as a CPU job.
#   sbatch sbatch/prepare_data.sh [--force] data.out_dir=/shared/data/dapo [data.<key>=<value> ...]
# Settings: the data.* keys (`beam-slurm prepare-data --help`; out_dir defaults to $DATA_DIR). No GPUs: CPU, hub
# downloads, disk.
#SBATCH --job-name=beam-prepare-data
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=8G
#SBATCH --time=01:00:00
#SBATCH --output=beam-prepare-data-%j.out
set -euo pipefail
# Slurm runs a spool copy of this script: sbatch/lib/locate_checkout.sh says how the checkout is found.
given=$(scontrol show job "${SLURM_JOB_ID:-none}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | grep .) || given=$0
source "${BEAM_SLURM_HOME:-$(cd "$(dirname "$given")/.." && pwd)}/sbatch/lib/locate_checkout.sh" ||
  { echo "$(basename "$0"): cannot find the beam-slurm checkout; set BEAM_SLURM_HOME=/path/to/beam-slurm" >&2; exit 2; }
exec "$python" "$BEAM_SLURM_HOME/stages/prepare_data.py" "$@"
