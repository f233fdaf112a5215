#!/bin/bash
# LoRA rank 64 on 2 nodes x 8 GPUs (32 prompts x 8 responses, one update per step).
# Usage: sbatch [sbatch options] sbatch/train_lora_16gpu.sh [key=value overrides...]
# Environment (seed names): MODEL_PATH DATA_DIR CKPT_PATH EXPORT_PATH RESUME_MODE MAX_TRAINING_STEPS CKPT_INTERVAL
#   OPTIMIZER_STATE_DISK_DIR KV_CACHE_DTYPE SKYRL_DIR BEAM_CONTAINER_IMAGE; BEAM_SLURM_HOME = this checkout.
# Header values are defaults: sbatch command-line options override them (cluster.nodes follows --nodes).
#SBATCH --job-name=beam-lora16
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --requeue
# A failed node leaves the job instead of ending it: the batch shell restarts Ray on the others and the spares.
#SBATCH --no-kill
#SBATCH --signal=B:USR1@300
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
# USR1 (the notice) would end this shell before Python listens; Python takes a lost one from the time left.
trap '' USR1
export BEAM_NOTICE_IGNORED_AT_START=1
set -euo pipefail
# Slurm runs a spool copy of this script: sbatch/lib/locate_checkout.sh says how the checkout is found.
given=$(scontrol show job "${SLURM_JOB_ID:-none}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | grep .) || given=$0
source "${BEAM_SLURM_HOME:-$(cd "$(dirname "$given")/.." && pwd)}/sbatch/lib/locate_checkout.sh" ||
  { echo "$(basename "$0"): cannot find the beam-slurm checkout; set BEAM_SLURM_HOME=/path/to/beam-slurm" >&2; exit 2; }
exec "$python" "$BEAM_SLURM_HOME/stages/train.py" recipe=lora_16gpu "$@"
