"""The goodput ledger of rehearsal runs through four kinds of fault on the Slurm sandbox, two per run (each within a
scenario's four minutes): a hang and a killed raylet (both restarted in the job); `beam-slurm requeue` (saved,
requeued) and a raw `scontrol requeue` (nothing saved). Known costs: 0.5 s steps, a 1 s model load; the ledger must explain Slurm's own accounting."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from json_output_checks import assert_json_valid
from ray_processes import one_raylet
from train_runs import wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

INTERVAL, STEP_S, NODES = 4, 0.5, 2
# 20 s, not less: on two loaded cores a 0.5 s rehearsal step can stall for seconds, and a second, unplanned
# "hang" would move the run to an attempt the test does not wait for.
HANG_S, LOAD_S = 20, 1
# A bring-up allowance that a loaded machine cannot use up: the hang must be the one in step 3, not a slow start.
# Waits are bounded by the job's own time limit: a loaded machine slows bring-up (minutes), not the verdicts.
LIMIT_S = 900
KEYS = ("cluster.grace_s=30", "cluster.signal_before_s=120", f"cluster.hang_timeout_s={HANG_S}",
        f"trainer.rehearsal_model_load_s={LOAD_S}", "trainer.expected_bringup_s=300")


def beam(run, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "beam_slurm.cli", *args], env=run.env(), capture_output=True,
                          text=True, timeout=180)


def attempt_steps(run, attempt: int, in_job: int) -> list[int]:
    return [int(m["step"]) for m in run.metrics() if (m["attempt"], m.get("in_job", 0)) == (attempt, in_job)]


def right_after_a_step(run, attempt: int, in_job: int, step: int) -> None:
    """Wait for `step` of that attempt to be logged: a fault then lands early in the next step. An attempt later than
    the one awaited fails the wait at once, with the job's output, instead of waiting out the limit."""

    def reached() -> bool:
        metrics = run.metrics()
        later = [m for m in metrics if (m["attempt"], m.get("in_job", 0)) > (attempt, in_job)]
        assert not later, f"attempt {later[0]['attempt']}.{later[0].get('in_job', 0)} began while waiting for " \
            f"step {step} of {attempt}.{in_job}\n{run.output()[-6000:]}"
        return step in [int(m["step"]) for m in metrics if (m["attempt"], m.get("in_job", 0)) == (attempt, in_job)]

    wait_for(reached, LIMIT_S, f"step {step} of attempt {attempt}.{in_job}")


def assert_the_ledger_explains_slurms_accounting(run, labels: list[str], kinds: list[str], min_redone: int) -> dict:
    """The run's ledger (report --json) against sacct, the redone steps and the timeline's attempts."""
    assert run.finish(timeout=LIMIT_S) == "COMPLETED", run.output()[-6000:]
    report = beam(run, "report", str(run.export_path), "--json")
    assert report.returncode == 0, report.stderr
    assert_json_valid("report", json.loads(report.stdout))
    ledger = json.loads(report.stdout)["runs"][0]["goodput"]
    phases, allocated = ledger["phases"], ledger["allocated_node_seconds"]
    story = json.dumps({k: v for k, v in ledger.items() if k != "timeline"}, indent=1)
    sacct = subprocess.run(["sacct", "-D", "-X", "-n", "-P", "-j", run.job_id, "-o", "ElapsedRaw,NNodes"],
                           env=run.env(), capture_output=True, text=True, check=True).stdout.split()
    slurm_node_seconds = sum(int(e) * int(n) for e, n in (line.split("|") for line in sacct))
    assert abs(allocated - slurm_node_seconds) <= 0.02 * slurm_node_seconds, (slurm_node_seconds, story)
    assert set(phases) == {"bring_up", "model_load", "productive", "lost", "checkpoint", "evaluation", "hang",
                           "stopping", "spare", "unaccounted"}
    assert abs(sum(phases.values()) - allocated) <= 0.02 * allocated, story
    assert phases["unaccounted"] <= 0.02 * allocated, story
    assert ledger["ratio"] == pytest.approx(ledger["productive_node_seconds"] / allocated)
    # productive: every step once; lost: the steps trained twice (the metrics log each training of a step), and at
    # most one partial step per fault that cut a step off
    steps = [int(m["step"]) for m in run.metrics()]
    redone = len(steps) - len(set(steps))
    assert sorted(set(steps)) == list(range(1, run.steps + 1))
    assert redone >= min_redone, steps
    expected_lost = redone * STEP_S * NODES
    assert abs(phases["lost"] - expected_lost) <= 0.2 * expected_lost + 2 * STEP_S * NODES, (expected_lost, story)
    assert phases["productive"] >= run.steps * STEP_S * NODES, story
    assert phases["model_load"] >= len(labels) * LOAD_S * NODES, story
    assert [line["attempt"] for line in ledger["timeline"]] == labels, ledger["timeline"]
    assert [line["end_kind"] for line in ledger["timeline"]] == kinds, ledger["timeline"]
    status = beam(run, "status", str(run.export_path))
    assert re.search(r"goodput \d+\.\d % of [\d.]+ GPU-h allocated; largest losses: \w+", status.stdout), status.stdout
    return phases


def test_the_ledger_of_a_hang_and_a_killed_raylet_both_restarted_in_the_job(train_run):
    run = train_run(steps=12, ckpt_interval=INTERVAL, step_seconds=STEP_S)
    run.submit(f"--time={LIMIT_S // 60}", overrides=(*KEYS, "trainer.rehearsal_hang_at_step=3"))
    # 1. the hang in step 3 (attempt 0) -> restarted in the job, from no checkpoint
    right_after_a_step(run, 0, 1, 5)  # 2. attempt 0.1 reaches step 5 (checkpoint at 4): kill a worker raylet
    worker = re.search(r"\[ray-node (n\d+) rank 1 ", run.output()).group(1)
    # The hang's restart was warm: the worker's raylet is still the one attempt 0 started.
    os.kill(wait_for(lambda: one_raylet(run.job_id, node=worker), 10, "the raylet"), 9)
    phases = assert_the_ledger_explains_slurms_accounting(run, ["0", "0.1", "0.2"],
                                                          ["hang", "node-failure", "finished"], min_redone=3)
    assert phases["hang"] >= HANG_S * NODES, phases


def test_the_ledger_of_a_graceful_and_a_raw_requeue(train_run):
    # 30 steps: the verb, started under load, must reach the job well before its last step
    run = train_run(steps=30, ckpt_interval=INTERVAL, step_seconds=STEP_S)
    run.submit(f"--time={LIMIT_S // 60}", overrides=KEYS)
    right_after_a_step(run, 0, 0, 5)  # 1. the operator's requeue, saved at the step boundary it reaches (load)
    assert beam(run, "requeue", str(run.export_path)).returncode == 0
    # 2. a raw scontrol requeue (nothing saved) in attempt 1, three steps past a periodic checkpoint and past the
    # step it resumed from, so steps are lost whatever step the requeue's save landed on
    first = wait_for(lambda: attempt_steps(run, 1, 0), LIMIT_S, "attempt 1's first step")[0]
    target = next(k for k in range(first + 1, run.steps) if k % INTERVAL == INTERVAL - 1)
    right_after_a_step(run, 1, 0, target)
    subprocess.run(["scontrol", "requeue", run.job_id], env=run.env(), check=True, timeout=30)
    phases = assert_the_ledger_explains_slurms_accounting(run, ["0", "1", "2"],
                                                          ["operator-requeue", "slurm-requeue", "finished"],
                                                          min_redone=1)
    assert phases["hang"] == 0, phases
