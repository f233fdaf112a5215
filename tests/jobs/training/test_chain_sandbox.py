"""Chained evaluation from a training job on the Slurm sandbox: the real `sbatch/train_lora_16gpu.sh` with the
rehearsal trainer and `eval.chain=true`, a requeue in the middle, and real evaluation jobs (submitit's one-task
array of `beam-slurm evaluate --checkpoint`, both datasets in one task, vLLM's CPU build on a tiny model). In the end
every HF export was evaluated by exactly one job, and `beam-slurm report` shows them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid

import evaluation_inputs
import pytest
from train_runs import REPO_ROOT, wait_for

from beam_slurm.config.overrides import override

pytestmark = [pytest.mark.sandbox, pytest.mark.vllm, pytest.mark.slow]





# Whole vLLM on 2 CPU cores: one replica, a couple of problems, short answers.
CPU_EVAL_ARGS = ["rollout.tensor_parallel=1", "rollout.pipeline_parallel=1", "eval.responses_per_problem=2",
                 "generation.max_response_tokens=16", "generation.max_prompt_tokens=256", "eval.dtype=float32",
                 "eval.gpu_memory_utilization=0.05", "eval.enforce_eager=true", "eval.limit=2", "grade.workers=1"]
STEPS, HF_INTERVAL, STEP_SECONDS = 30, 15, 2.0
EXPORT_STEPS = [15, 30]  # every hf_save_interval (the last one is also the end), each one evaluation job
SETTLE_S = 8  # an export unchanged this long is complete (the default minute would only make the test longer)


def test_chain_evaluates_each_export_once_across_a_requeue(train_run, tmp_path):
    inputs = evaluation_inputs
    run_name = f"chain-{uuid.uuid4().hex[:8]}"
    # The first export (step 15) must settle (SETTLE_S unchanged) and be submitted while attempt 0 still runs, so
    # that the requeued attempt finds it already claimed: 2 s steps leave it 30 s to do so, and the notice ~20 s.
    run = train_run(steps=STEPS, ckpt_interval=5, step_seconds=STEP_SECONDS, extra_env={"RUN_NAME": run_name})
    model = inputs.build_tiny_model(tmp_path / "model", taught_answers=inputs.TAUGHT_ANSWERS,
                                    taught_prompts=inputs.TAUGHT_PROMPTS)
    shutil.copytree(model, run.model_path)  # nodes have a private /tmp: the model must be on shared storage
    run.data_dir.mkdir()
    for name, source in (("aime-2025-cleaned.parquet", "aime2025"), ("aime-2024-cleaned.parquet", "aime2024")):
        inputs.write_aime_parquet(run.data_dir / name, data_source=source)

    run.submit("--time=00:15:00", overrides=(
        "cluster.grace_s=30", "cluster.signal_before_s=120", "eval.chain=true", "eval.chain_poll_s=2",
        f"eval.chain_settle_s={SETTLE_S}",
        f"checkpoint.hf_save_interval={HF_INTERVAL}", "rollout.pipeline_parallel=1",
        override("eval.chain_extra_args", CPU_EVAL_ARGS)))
    started = time.monotonic()
    claims = run.export_path / ".eval_claims"
    first_claim = claims / "global_step_15.json"
    wait_for(lambda: first_claim.exists() and json.loads(first_claim.read_text()).get("job_id"), 300,
             "attempt 0 to submit the evaluation of step 15")
    assert not run.steps_by_attempt().get(1), "the first export must be claimed by the first attempt"
    subprocess.run(["scancel", "--signal=USR1", "--batch", run.job_id], check=True, env=run.sandbox.env(),
                   timeout=30)
    state = run.finish(timeout=900)  # the job's time limit: under load a requeued attempt's bring-up took minutes
    out = run.output()
    assert state == "COMPLETED", out[-6000:]
    print(f"training with the chain: {time.monotonic() - started:.0f}s")
    assert run.restarts() == 1 and run.resumed_from(), out[-4000:]
    run.assert_every_step_once_after_resume()

    exports = sorted(int(p.name.removeprefix("global_step_")) for p in run.export_path.glob("global_step_*"))
    assert exports == EXPORT_STEPS
    claimed = {int(p.stem.removeprefix("global_step_")): json.loads(p.read_text())
               for p in claims.glob("global_step_*.json")}
    assert sorted(claimed) == EXPORT_STEPS, claimed
    eval_jobs = {step: claim["job_id"] for step, claim in claimed.items()}
    assert all(eval_jobs.values()) and len(set(eval_jobs.values())) == len(EXPORT_STEPS), eval_jobs
    assert out.count("eval-chain: global_step_15 -> evaluation job") == 1
    for step, job in eval_jobs.items():
        state = run.sandbox.wait(job, timeout=600)
        # submitit's logs of the chained evaluation: <log_dir>/eval-step<N>-<job id>/
        log = "".join(p.read_text(errors="replace") for p in run.export_path.glob(f"logs/eval-step{step}-*/*.out"))
        assert state == "COMPLETED", log[-4000:]

    # Slurm saw exactly one evaluation job per export step, under the run's name.
    proc = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,JobName,State", "--name",
                           ",".join(f"{run_name}-eval-{step}" for step in EXPORT_STEPS), "-S", "now-1hour"],
                          capture_output=True, text=True, env=run.sandbox.env(), timeout=60, check=True)
    rows = [line.split("|") for line in proc.stdout.splitlines() if line]
    assert sorted(name for _, name, _ in rows) == sorted(f"{run_name}-eval-{s}" for s in EXPORT_STEPS), rows
    assert {job for job, _, _ in rows} == set(eval_jobs.values())

    for step in EXPORT_STEPS:
        metrics = json.loads((run.export_path / "beam_evals" / f"global_step_{step}" / "metrics.json").read_text())
        assert set(metrics) == {"aime2025", "aime2024"}, metrics
        assert all(m["k"] == 2 for m in metrics.values())

    report = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "beam-slurm"), "report", str(run.export_path)],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    for step in EXPORT_STEPS:
        assert re.search(rf"(?m)^\W*{step}\b", report.stdout), report.stdout
    plot = run.export_path / "beam_evals" / "report.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", report.stdout
