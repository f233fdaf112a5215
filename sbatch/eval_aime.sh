#!/bin/bash
# Evaluate one checkpoint on AIME with vLLM (TP8 x PP2 over 2 nodes for Beam), grade, write the metrics.
# Usage: sbatch [sbatch options] sbatch/eval_aime.sh --checkpoint EXPORT/global_step_N \
#          --data DATA_DIR/aime-2025-cleaned.parquet --data DATA_DIR/aime-2024-cleaned.parquet \
#          rollout.tensor_parallel=8 rollout.pipeline_parallel=2 [key=value ...]
# Arguments: those of `beam-slurm evaluate`: inputs as flags, settings as recipe keys (`beam-slurm evaluate --help`);
# results default to EXPORT/beam_evals/global_step_N/.
# One node: runs directly; several: Ray across the nodes, the evaluation as driver on the head (stages/evaluate.py).
# A requeued attempt reuses the responses saved per chunk and the finished results, so requeueing is safe.
# `beam-slurm evaluate RUN|SWEEP|--checkpoint ...` submits many checkpoints as one job array instead.
#SBATCH --job-name=beam-eval-aime
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=04:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -euo pipefail
# Slurm runs a spool copy of this script: sbatch/lib/locate_checkout.sh says how the checkout is found.
given=$(scontrol show job "${SLURM_JOB_ID:-none}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | grep .) || given=$0
source "${BEAM_SLURM_HOME:-$(cd "$(dirname "$given")/.." && pwd)}/sbatch/lib/locate_checkout.sh" ||
  { echo "$(basename "$0"): cannot find the beam-slurm checkout; set BEAM_SLURM_HOME=/path/to/beam-slurm" >&2; exit 2; }
exec "$python" "$BEAM_SLURM_HOME/stages/evaluate.py" "$@"
