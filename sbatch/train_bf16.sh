#!/bin/bash
# Full-parameter BF16 on 8 nodes x 8 GPUs, optimizer state on node-local NVMe (OPTIMIZER_STATE_DISK_DIR).
# Usage: sbatch [sbatch options] sbatch/train_bf16.sh [key=value overrides...]
# Environment (seed names): MODEL_PATH DATA_DIR CKPT_PATH EXPORT_PATH RESUME_MODE MAX_TRAINING_STEPS CKPT_INTERVAL
#   OPTIMIZER_STATE_DISK_DIR KV_CACHE_DTYPE SKYRL_DIR BEAM_CONTAINER_IMAGE; BEAM_SLURM_HOME = this checkout.
# Header values are defaults: sbatch command-line options override them (cluster.nodes follows --nodes).
#SBATCH --job-name=beam-bf16
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -euo pipefail
# Slurm runs a spool copy of this script: find the checkout from the path sbatch was given unless BEAM_SLURM_HOME is set.
if [[ -z "${BEAM_SLURM_HOME:-}" ]]; then
  submitted=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | head -n1)
  [[ "$submitted" == /* ]] || submitted="${SLURM_SUBMIT_DIR:-$PWD}/$submitted"
  BEAM_SLURM_HOME=$(cd "$(dirname "$submitted")/.." 2>/dev/null && pwd || true)
fi
if [[ ! -f "$BEAM_SLURM_HOME/beam_slurm/cli.py" ]]; then
  echo "$(basename "$0"): cannot find the beam-slurm checkout (tried '$BEAM_SLURM_HOME'); set BEAM_SLURM_HOME" >&2
  exit 2
fi
export BEAM_SLURM_HOME
exec "${BEAM_PYTHON:-$BEAM_SLURM_HOME/.venv/bin/python}" -m beam_slurm.cli train recipe=bf16_64gpu "$@"
