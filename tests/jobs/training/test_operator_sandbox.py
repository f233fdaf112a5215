"""Operator verbs, signals that hit every step, the no-progress guard and bad nodes, on the Slurm sandbox.

Real Slurm, real Ray across the nodes, the real batch script started with plain `sbatch` (so the run record is the
one the training job writes itself), the real `beam-slurm requeue|stop|status|submit`; only the GPU trainer is stood
in for by the rehearsal trainer. Each scenario is a few short steps.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest
from json_output_checks import assert_json_valid
from ray_processes import one_raylet
from train_runs import REPO_ROOT, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

QUICK = ("cluster.grace_s=30", "cluster.signal_before_s=120")
STEPS_PAST_THE_VERB = 40
"""Steps of a run that an operator verb must reach before its end: under load `beam-slurm requeue|stop` (its own
start and the recipe's load) reached the job 11-20 s after it was run, when 10- and 14-step runs had finished."""


def beam(run, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`beam-slurm ARGS` with the run's environment (what the user who started it has)."""
    return subprocess.run([sys.executable, "-m", "beam_slurm.cli", *args], cwd=REPO_ROOT, env=run.env(),
                          capture_output=True, text=True, timeout=timeout)


def status_rows(run, target: str) -> list[dict]:
    """The jobs of `beam-slurm status TARGET --json`."""
    proc = beam(run, "status", target, "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert_json_valid("status", json.loads(proc.stdout))
    return json.loads(proc.stdout)["jobs"]


def attempt_rows(rows: list[dict], job_id: str) -> list[dict]:
    """The attempts of the training job `job_id`."""
    return train_row(rows, job_id)["attempts"]


def train_row(rows: list[dict], job_id: str) -> dict:
    return next(r for r in rows if r["stage"] == "train" and r["job_id"] == job_id)


def test_requeue_verb_saves_at_the_step_boundary_and_redoes_nothing(train_run):
    # No periodic checkpoint: only the requeue's save can be resumed. 40 one-second steps: under load the verb
    # reached the job more than 11 s after step 3 (its start, the recipe's load), when 14 steps were all done.
    run = train_run(steps=STEPS_PAST_THE_VERB, ckpt_interval=100)
    run.submit("--time=00:10:00", overrides=QUICK)
    run.wait_for_steps(3)
    asked = time.monotonic()
    proc = beam(run, "requeue", str(run.export_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr + run.output()[-4000:]
    saved = int(re.search(r"checkpoint of step (\d+) saved", proc.stdout).group(1))
    assert f"requeued: attempt 1 resumes from step {saved}" in proc.stdout, proc.stdout
    wait_for(lambda: 1 in run.steps_by_attempt(), 240, "the next attempt's first step")
    print(f"beam-slurm requeue -> training again: {time.monotonic() - asked:.1f}s")
    assert run.finish(timeout=300) == "COMPLETED", run.output()[-6000:]

    assert len(run.metrics()) == STEPS_PAST_THE_VERB, f"steps redone: {run.steps_by_attempt()}"
    assert run.resumed_from() == [saved]
    run.assert_every_step_once_after_resume()
    assert "notice SIGUSR2 received (beam-slurm requeue by" in run.attempt_log(0)

    # `status` of a job started with plain sbatch, by its export path and by its job id
    for target in (str(run.export_path), run.job_id):
        rows = status_rows(run, target)
        assert train_row(rows, run.job_id)["state"] == "COMPLETED", rows
        attempts = attempt_rows(rows, run.job_id)
        assert [a["state"] for a in attempts] == ["operator-requeue", "finished"], attempts
        assert attempts[0]["saved_step"] == saved and attempts[1]["checkpoint_at_start"] == saved, attempts
    record = json.loads((run.export_path / "beam_run" / "run.json").read_text())
    assert record["train_jobs"][run.job_id]["started_by"] == "sbatch"
    assert record["recipe"] == "lora_16gpu" and (run.export_path / "beam_run" / "config.yaml").is_file()


def test_stop_verb_ends_the_job_stopped_and_submit_resumes_it(train_run):
    run = train_run(steps=STEPS_PAST_THE_VERB, ckpt_interval=100)
    run.submit("--time=00:10:00", overrides=QUICK)
    dependent = run.sandbox.sbatch("#!/bin/bash\ntrue\n", f"--dependency=afterok:{run.job_id}",
                                   "--kill-on-invalid-dep=no", f"--output={run.work}/dependent-%j.out")
    run.wait_for_steps(3)
    proc = beam(run, "stop", run.job_id)
    assert proc.returncode == 0, proc.stdout + proc.stderr + run.output()[-4000:]
    saved = int(re.search(r"checkpoint of step (\d+) saved", proc.stdout).group(1))
    assert f"stopped at step {saved}, resumable" in proc.stdout, proc.stdout
    assert run.finish(timeout=120) == "FAILED", "stopped, not COMPLETED"
    assert run.sacct_attempts()[-1]["State"] == "FAILED"

    rows = status_rows(run, str(run.export_path))
    row = train_row(rows, run.job_id)
    assert row["state"] == "STOPPED" and f"stopped at step {saved}, resumable" in row["reason"], row
    assert f"can no longer run: {dependent}" in row["reason"], row
    assert run.sandbox.scontrol_job(dependent).get("JobState") == "PENDING"
    run.sandbox.cancel(dependent)

    submitted = beam(run, "submit", "--stages", "train", "recipe=lora_16gpu", "cluster.nodes=2",
                     "cluster.time_limit=00:10:00", "cluster.check_paths_on_submit=false", *QUICK)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert f"resumes from step {saved}" in submitted.stdout, submitted.stdout
    new_job = re.search(r"train\s+job (\d+)\s+submitted", submitted.stdout).group(1)
    run.sandbox.submitted.append(new_job)
    assert run.sandbox.wait(new_job, timeout=300) == "COMPLETED"
    output = (run.export_path / "logs" / f"train-{new_job}.out").read_text()
    assert f"[rehearsal] resumed from step {saved} (latest)" in output, output[-4000:]
    steps = [m["step"] for m in run.metrics()]
    assert sorted(steps) == list(range(1, STEPS_PAST_THE_VERB + 1)) and len(steps) == STEPS_PAST_THE_VERB, steps


@pytest.mark.slurm_semantics
def test_raw_scontrol_requeue_is_recognised_and_resumes_from_the_last_checkpoint(train_run):
    run = train_run(steps=12, ckpt_interval=4)
    run.submit("--time=00:10:00", overrides=QUICK)
    run.wait_for_steps(6)
    subprocess.run(["scontrol", "requeue", run.job_id], check=True, env=run.sandbox.env(), timeout=30)
    assert run.finish(timeout=300) == "COMPLETED", run.output()[-6000:]

    first = run.attempt_log(0)
    assert "Slurm is ending this attempt (requeued)" in first, first
    assert "the job is already requeued" in first and "requeue failed" not in first, first
    last_saved = max(step for step, state in run.checkpoints().items() if state["attempt"] == 0)
    assert run.resumed_from() == [last_saved]
    run.assert_every_step_once_after_resume()
    attempts = attempt_rows(status_rows(run, run.job_id), run.job_id)
    assert [a["state"] for a in attempts] == ["slurm-requeue", "finished"], attempts


def test_a_failure_in_every_attempt_stops_at_the_no_progress_limit(train_run):
    run = train_run(steps=40, ckpt_interval=100)  # no checkpoint before the faults
    run.submit("--time=00:10:00", overrides=(*QUICK, "cluster.max_requeues=5", "cluster.max_in_job_attempts=0"))
    record = run.export_path / "beam_run" / "run.json"
    for attempt in (0, 1):
        def nodes_of_attempt():
            try:
                job = json.loads(record.read_text())["train_jobs"][run.job_id]
            except (OSError, ValueError, KeyError):
                return None
            entry = next((a for a in job["attempts"] if a["attempt"] == attempt), None)
            return entry and entry["nodes"]

        head = wait_for(nodes_of_attempt, 240, f"attempt {attempt} to start")[0]
        wait_for(lambda: len(run.steps_by_attempt().get(attempt, [])) >= 2, 240, f"attempt {attempt}'s steps")
        pid = wait_for(lambda: one_raylet(run.job_id, attempt=attempt, not_on=head), 30, f"a worker raylet of attempt {attempt}")
        os.kill(pid, 9)
    assert run.finish(timeout=240) == "FAILED", run.output()[-6000:]

    second = run.attempt_log(1)
    assert "2 attempts in a row ended by a failure without a newer checkpoint" in second, second
    assert len(run.sacct_attempts()) == 2, run.sacct_attempts()
    row = train_row(status_rows(run, str(run.export_path)), run.job_id)
    assert "cluster.max_attempts_without_progress=2" in row["reason"], row
    assert "submit` again resumes" in row["reason"], row


def test_a_bad_node_is_excluded_and_the_run_completes_on_the_others(train_run, slurm_sandbox):
    # The injected fault: the model path exists in every node's private /tmp but one.
    model = f"/tmp/beam-badnode-{uuid.uuid4().hex[:8]}/model"
    run = train_run(steps=6, ckpt_interval=3, extra_env={"MODEL_PATH": model})
    run.submit("--time=00:10:00", overrides=QUICK)

    def allocated():
        nodes = slurm_sandbox.scontrol_job(run.job_id).get("NodeList", "")
        return nodes if nodes and nodes != "(null)" else None

    nodes = subprocess.run(["scontrol", "show", "hostnames", wait_for(allocated, 240, "the allocation", 0.1)],
                           capture_output=True, text=True, env=slurm_sandbox.env(), check=True).stdout.split()
    bad = nodes[1]  # not the batch host
    for node in slurm_sandbox.nodes:
        if node != bad:
            (slurm_sandbox.state_dir / "nodes" / node / "tmp" / model.removeprefix("/tmp/")).mkdir(parents=True)
    assert run.finish(timeout=300) == "COMPLETED", run.output()[-6000:]

    first = run.attempt_log(0)
    assert f"preflight FAILED on {bad}: {model} does not exist here" in first, first
    assert f"the next attempt avoids {bad}" in first, first
    attempts = run.sacct_attempts()
    assert bad not in subprocess.run(["scontrol", "show", "hostnames", attempts[-1]["NodeList"]], capture_output=True,
                                     text=True, env=slurm_sandbox.env(), check=True).stdout.split(), attempts
    assert run.marker() == 6
    row = train_row(status_rows(run, str(run.export_path)), run.job_id)
    assert f"excluded nodes {bad}" in row["reason"], row
    record = json.loads((run.export_path / "beam_run" / "run.json").read_text())
    assert [b["node"] for b in record["bad_nodes"]] == [bad]
