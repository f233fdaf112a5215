#!/bin/bash
# Import the recipe's container image once into shared storage, for every node and every later job.
#   sbatch sbatch/pull_container.sh container.runtime=pyxis container.image=REF container.image_cache_dir=/shared/containers
# (or set BEAM_CONTAINER_RUNTIME / BEAM_CONTAINER_IMAGE / BEAM_CONTAINER_CACHE_DIR; `--force` imports again).
# Arguments: those of `beam-slurm pull-container` (`--help` lists the keys). No GPUs: CPU, network, disk.
#SBATCH --job-name=beam-pull-container
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --time=02:00:00
#SBATCH --output=beam-pull-container-%j.out
#SBATCH --open-mode=append
set -euo pipefail
# Slurm runs a spool copy of this script: sbatch/lib/locate_checkout.sh says how the checkout is found.
given=$(scontrol show job "${SLURM_JOB_ID:-none}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | grep .) || given=$0
source "${BEAM_SLURM_HOME:-$(cd "$(dirname "$given")/.." && pwd)}/sbatch/lib/locate_checkout.sh" ||
  { echo "$(basename "$0"): cannot find the beam-slurm checkout; set BEAM_SLURM_HOME=/path/to/beam-slurm" >&2; exit 2; }
exec "$python" "$BEAM_SLURM_HOME/stages/pull_container.py" "$@"
