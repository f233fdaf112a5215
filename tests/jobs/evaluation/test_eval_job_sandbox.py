"""sbatch/eval_aime.sh as a real Slurm job on the sandbox: real vLLM (CPU build) -> responses -> grades -> metrics."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from aime_files import GROUND_TRUTHS, write_aime_parquet

REPO_ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.sandbox, pytest.mark.vllm, pytest.mark.slow]
# The tiny model on vLLM's CPU build: one process (TP1 x PP1), float32, a small KV cache, no graph capture.
CPU_ENGINE = ["rollout.tensor_parallel=1", "rollout.pipeline_parallel=1", "eval.dtype=float32",
              "eval.gpu_memory_utilization=0.05", "eval.enforce_eager=true", "generation.max_prompt_tokens=256",
              "grade.workers=1"]


def test_eval_job_writes_metrics_beside_the_export(slurm_sandbox, tiny_model_dir):
    # Nodes have a private /tmp: everything the job reads or writes lives on the shared folder.
    work = slurm_sandbox.new_dir("eval-job")
    export_step = work / "exports" / "run1" / "global_step_5"
    shutil.copytree(tiny_model_dir, export_step / "policy")
    data = write_aime_parquet(work / "aime-tiny-cleaned.parquet")
    k = 2
    # The batch script exactly as a user submits it: sbatch options, the script, then `evaluate` arguments.
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", f"--output={work}/eval-%j.out",
         str(REPO_ROOT / "sbatch" / "eval_aime.sh"),
         "--checkpoint", str(export_step), "--data", str(data), f"eval.responses_per_problem={k}",
         "generation.max_response_tokens=16", *CPU_ENGINE],
        capture_output=True, text=True, env=slurm_sandbox.env(), timeout=60, check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    slurm_sandbox.submitted.append(job_id)
    state = slurm_sandbox.wait(job_id, timeout=420)
    log = (work / f"eval-{job_id}.out").read_text()
    assert state == "COMPLETED", log[-4000:]

    out = export_step.parent / "beam_evals" / "global_step_5"
    metrics = json.loads((out / "metrics.json").read_text())["aime_tiny"]
    grades = [json.loads(line) for line in (out / "grades.jsonl").read_text().splitlines()]
    assert len(grades) == len(GROUND_TRUTHS) * k
    assert metrics["k"] == k
    assert metrics["avg@k"] == pytest.approx(sum(g["correct"] for g in grades) / len(grades))
    # The taught model answers 42 under the recipe's reasoning effort: the problems whose truth is 42 are right
    # at least once, the one whose truth is 7 never.
    assert {g["problem_id"] for g in grades if g["correct"]} == {"p0", "p1"}
    info = json.loads((out / "info.json").read_text())
    assert info["slurm_job_id"] == job_id


def test_two_node_eval_job_runs_the_evaluation_as_the_ray_driver(slurm_sandbox, tiny_model_dir):
    # Two nodes: stages/evaluate.py checks the inputs, starts Ray on both nodes with one srun and runs the
    # evaluation as the driver on the head (RAY_ADDRESS set). The tiny model needs no parallelism (TP1 x PP1).
    work = slurm_sandbox.new_dir("eval-job-2n")
    export_step = work / "exports" / "run1" / "global_step_10"
    shutil.copytree(tiny_model_dir, export_step / "policy")
    data = write_aime_parquet(work / "aime-tiny-cleaned.parquet")
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--nodes=2", f"--output={work}/eval-%j.out",
         str(REPO_ROOT / "sbatch" / "eval_aime.sh"),
         "--checkpoint", str(export_step), "--data", str(data), "eval.responses_per_problem=1",
         "generation.max_response_tokens=8", *CPU_ENGINE],
        capture_output=True, text=True, env=slurm_sandbox.env(), timeout=60, check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    slurm_sandbox.submitted.append(job_id)
    state = slurm_sandbox.wait(job_id, timeout=420)
    log = (work / f"eval-{job_id}.out").read_text()
    assert state == "COMPLETED", log[-4000:]
    steps = {row["JobName"] for row in slurm_sandbox.sacct(job_id)}
    assert "eval-ray" in steps  # the Ray step over both nodes ran
    out = export_step.parent / "beam_evals" / "global_step_10"
    assert json.loads((out / "metrics.json").read_text())["aime_tiny"]["k"] == 1
    info = json.loads((out / "info.json").read_text())
    assert info["slurm_job_id"] == job_id


def test_bad_input_fails_the_job_with_status_2_before_ray_starts(slurm_sandbox):
    work = slurm_sandbox.new_dir("eval-job-bad")
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--nodes=2", f"--output={work}/eval-%j.out",
         str(REPO_ROOT / "sbatch" / "eval_aime.sh"),
         "--checkpoint", str(work / "no-such-export" / "global_step_1"), "--data", str(work / "none.parquet")],
        capture_output=True, text=True, env=slurm_sandbox.env(), timeout=60, check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    slurm_sandbox.submitted.append(job_id)
    assert slurm_sandbox.wait(job_id, timeout=120) == "FAILED"
    rows = slurm_sandbox.sacct(job_id, allocations_only=True)
    assert rows[0]["ExitCode"].startswith("2:")
    assert "--checkpoint" in (work / f"eval-{job_id}.out").read_text()
    assert {row["JobName"] for row in slurm_sandbox.sacct(job_id)}.isdisjoint({"eval-ray"})
