#!/usr/bin/env bash
# The main job on the embedded default: a local 4-node Slurm sandbox (fake GPUs) and the rehearsal trainer.
#   1. install everything (apt + venvs), 2. bring the sandbox up, 3. make small demonstration inputs,
#   4. `beam-slurm submit`: prepare-data job -> training job (sbatch/train_lora_16gpu.sh, 2 nodes x 8 GPUs, Ray,
#      rehearsal trainer, checkpoints), 5. follow it with `beam-slurm status --watch`, 6. `beam-slurm report`.
# The rehearsal trainer checks the plumbing; it does not train. Outputs land under the sandbox's shared folder.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/outside_tmp.sh"
run_outside_tmp "$ROOT" tools/run_main.sh "$@"
cd "$ROOT"
bash tools/install.sh
.venv/bin/python tools/slurm_sandbox.py up
eval "$(.venv/bin/python tools/slurm_sandbox.py env)"
DEMO="${BEAM_DEMO_DIR:-/var/tmp/beam-slurm-sandbox/shared/demo-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$DEMO"
SOURCES=$(.venv/bin/python tools/make_demo_inputs.py "$DEMO")
export BEAM_SLURM_HOME="$ROOT" MODEL_PATH="$DEMO/model" DATA_DIR="$DEMO/data" CKPT_PATH="$DEMO/ckpts" \
  EXPORT_PATH="$DEMO/exports" BEAM_TRAINER_BACKEND=rehearsal MAX_TRAINING_STEPS="${MAX_TRAINING_STEPS:-20}" \
  CKPT_INTERVAL="${CKPT_INTERVAL:-5}" BEAM_REHEARSAL_STEP_SECONDS="${BEAM_REHEARSAL_STEP_SECONDS:-1}" \
  SBATCH_MEM_PER_NODE="${SBATCH_MEM_PER_NODE:-2000M}"
# DATA_DIR is written by the submission's data stage below, so plan cannot find the data files yet.
.venv/bin/beam-slurm plan recipe=lora_16gpu cluster.check_paths_on_submit=false
.venv/bin/beam-slurm submit recipe=lora_16gpu cluster.time_limit=00:30:00 \
  data.dapo_math="$SOURCES/dapo-math-17k.parquet" data.aime2024="$SOURCES/aime-2024.parquet" \
  data.aime2025="$SOURCES/aime2025.jsonl"
.venv/bin/beam-slurm status "$EXPORT_PATH" --watch
.venv/bin/beam-slurm report "$EXPORT_PATH"
echo "demo outputs: $DEMO (checkpoints in $CKPT_PATH, logs in $EXPORT_PATH/logs)"
