#!/bin/bash
# Evaluate one checkpoint on AIME with vLLM (TP8 x PP2 over 2 nodes for Beam), grade, write the metrics.
# Usage: sbatch [sbatch options] sbatch/eval_aime.sh --checkpoint EXPORT/global_step_N \
#          --data DATA_DIR/aime-2025-cleaned.parquet --data DATA_DIR/aime-2024-cleaned.parquet --tp 8 --pp 2
# Arguments: those of `beam-slurm evaluate` (results default to EXPORT/beam_evals/global_step_N/).
# One node: runs directly; several: Ray across the nodes, the evaluation as driver on the head (stages/evaluate.py).
# A requeued attempt reuses the finished responses or results, so requeueing is safe.
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
exec "${BEAM_PYTHON:-$BEAM_SLURM_HOME/.venv/bin/python}" "$BEAM_SLURM_HOME/stages/evaluate.py" "$@"
