"""`sbatch sbatch/train_lora_16gpu.sh` end to end on the Slurm sandbox, with the rehearsal trainer.

Real Slurm, real Ray across the nodes, the real batch script, train CLI, train job, Ray bootstrap and rehearsal
trainer; only the GPU trainer itself is stood in for by the rehearsal (it runs the step loop and writes SkyRL's
checkpoint layout, it does not train). Each test checks one way a run is interrupted: a notice to the batch shell,
preemption by a higher-priority partition, the time limit, a worker node's Ray dying.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time

import pytest
from ray_processes import one_raylet
from train_runs import wait_for

from beam_slurm.slurm.values import reported_seconds as duration_seconds

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

# Small steps, and notice settings that fit a short test (the recipe's 240 s grace assumes a 300 s signal lead).
QUICK = ("cluster.grace_s=30", "cluster.signal_before_s=120")


def test_rehearsal_run_on_two_nodes(train_run):
    run = train_run(steps=7, ckpt_interval=3, gpus_per_node=8)  # the recipe's GPUs as they are: 16 actors
    # The header asks for USR1 300 s before the limit: a 10 minute limit keeps it away from this short run.
    # A site's setup lines (a profile's cluster.setup): run by the batch shell before Python, their exports on every
    # node (NCCL_* is inherited there by trainer.env_inherit).
    setup = "cluster.setup=['echo site setup ran','export NCCL_SOCKET_NTHREADS=3']"
    run.submit("--time=00:10:00", overrides=(*QUICK, setup))
    started = time.monotonic()
    state = run.finish(timeout=300)
    out = run.output()
    assert state == "COMPLETED", out[-6000:]
    print(f"rehearsal run: {time.monotonic() - started:.0f}s from submission to the end")

    # The checkout was found from the submitted path (the job ran a spool copy, BEAM_SLURM_HOME unset).
    assert "all 2 nodes and 16 GPUs registered" in out, out
    assert "[rehearsal] 16 GPU actors on 2 nodes" in out, out
    assert "[rehearsal] training done: 7 steps" in out, out
    assert "the driver finished successfully" in run.attempt_log(0)
    assert "notice" not in run.attempt_log(0), "a plain run: no notice, no requeue"

    node_list = run.sandbox.scontrol_job(run.job_id)["NodeList"]
    job_nodes = subprocess.run(["scontrol", "show", "hostnames", node_list], capture_output=True, text=True,
                               env=run.sandbox.env(), timeout=30, check=True).stdout.split()
    placement = json.loads((run.export_path / "rehearsal" / "placement_attempt_0.json").read_text())
    assert len(placement) == 16
    hosts = sorted({slot["hostname"] for slot in placement})
    assert hosts == sorted(job_nodes), (placement, job_nodes)
    for host in hosts:
        gpus = [gpu for slot in placement if slot["hostname"] == host for gpu in slot["gpu_ids"]]
        assert sorted(gpus, key=int) == [str(i) for i in range(8)], f"{host}: each GPU to exactly one actor: {gpus}"

    assert list(run.checkpoints()) == [3, 6, 7], "checkpoints at the interval and at the end"
    assert run.marker() == 7
    assert [m["step"] for m in run.metrics()] == list(range(1, 8))
    assert run.restarts() == 0
    assert not run.ray_left_running()
    assert out.count("site setup ran") == 1, out  # once: the command started again after the lines skips them
    for host in hosts:
        exported = json.loads((run.export_path / "logs" / f"{run.job_id}-0" / "env" / f"{host}.json").read_text())
        assert exported["exported"].get("NCCL_SOCKET_NTHREADS") == "3", (host, exported)


def test_notice_saves_requeues_and_resumes(train_run):
    run = train_run(steps=12, ckpt_interval=5)
    run.submit("--time=00:10:00", overrides=QUICK)
    run.wait_for_steps(3)
    subprocess.run(["scancel", "--signal=USR1", "--batch", run.job_id], check=True, env=run.sandbox.env(),
                   timeout=30)
    noticed = time.monotonic()
    state = run.finish(timeout=300)
    out = run.output()
    assert state == "COMPLETED", out[-6000:]
    print(f"notice -> requeue -> resume -> done: {time.monotonic() - noticed:.0f}s")

    saved = int(re.search(r"checkpoint of step (\d+) saved on notice", run.attempt_log(0)).group(1))
    assert saved >= 3 and saved in run.checkpoints() and run.checkpoints()[saved]["attempt"] == 0
    assert "notice SIGUSR1: job requeued" in run.attempt_log(0)
    assert run.resumed_from() == [saved]
    run.assert_every_step_once_after_resume()
    assert sorted(run.steps_by_attempt()) == [0, 1]
    assert "the driver finished successfully" in run.attempt_log(1)
    assert "attempt 1]" in run.attempt_log(1)
    assert run.restarts() == 1
    assert [row["State"] for row in run.sacct_attempts()] == ["REQUEUED", "COMPLETED"]
    assert run.marker() == 12


@pytest.mark.slurm_semantics
def test_preemption_by_the_high_partition(train_run):
    # GraceTime of the low partition is 20 s: the save must come well within it.
    run = train_run(steps=12, ckpt_interval=5)
    run.submit("-p", run.sandbox.partition("low"), "--time=00:10:00", overrides=("cluster.grace_s=8", "cluster.signal_before_s=120"))
    run.wait_for_steps(3)
    nodes = run.sandbox.scontrol_job(run.job_id)["NodeList"]
    high = run.sandbox.sbatch(
        "#!/bin/bash\nsleep 5\n", "-p", run.sandbox.partition("high"), "-N2", f"--nodelist={nodes}", "--exclusive", "--time=00:02:00",
        f"--output={run.work}/high-%j.out")
    preempted = time.monotonic()
    assert run.sandbox.wait(high, timeout=120) == "COMPLETED"
    state = run.finish(timeout=300)
    out = run.output()
    assert state == "COMPLETED", out[-6000:]
    print(f"preemption -> requeue -> resume -> done: {time.monotonic() - preempted:.0f}s")

    first = run.attempt_log(0)
    saved = int(re.search(r"checkpoint of step (\d+) saved on notice", first).group(1))
    # Either our `scontrol requeue` came first (the save fits well within GraceTime) or Slurm requeued the job at
    # the end of GraceTime and ours failed or was redundant: both must end in the same place.
    assert "notice SIGUSR1: job requeued" in first or "DUE TO PREEMPTION" in out, out[-4000:]
    assert run.resumed_from()[0] == saved
    run.assert_every_step_once_after_resume()
    assert run.marker() == 12
    assert run.restarts() >= 1
    attempts = run.sacct_attempts()
    assert attempts[-1]["State"] == "COMPLETED"
    # The high job ran on the train job's nodes in between: after the first attempt gave them up, before the next.
    high_row = run.sandbox.sacct(high, allocations_only=True)[0]
    assert high_row["NodeList"] == nodes
    assert attempts[0]["End"] <= high_row["Start"] and high_row["End"] <= attempts[-1]["Start"], (attempts, high_row)


@pytest.mark.slurm_semantics
def test_time_limit_notice_saves_and_a_later_attempt_finishes(train_run):
    # The limit is set from what the run measured: once it trains, the job gets whole minutes that leave 71-131 s,
    # so the USR1 (70 s before the limit; Slurm: up to 60 s earlier) comes within ~61 s while it trains, however
    # long Ray took to come up on a loaded machine. At most ~63 one-second steps fit before it: 80 need two attempts.
    run = train_run(steps=80, ckpt_interval=25)
    run.submit("--time=00:10:00", "--signal=B:USR1@70",
               overrides=("cluster.grace_s=20", "cluster.signal_before_s=70"))
    started = time.monotonic()
    run.wait_for_steps(1)
    ran_s = duration_seconds(run.sandbox.scontrol_job(run.job_id)["RunTime"])
    subprocess.run(["scontrol", "update", f"JobId={run.job_id}", f"TimeLimit={math.ceil((ran_s + 71) / 60)}"],
                   check=True, env=run.sandbox.env(), timeout=30)
    # Once requeued, the job gets the time to finish, as a user would give it: a second attempt under the same
    # short limit could end on a notice again, and the test is about the first one.
    wait_for(lambda: run.restarts() >= 1, 300, "the requeue after the time-limit notice")
    subprocess.run(["scontrol", "update", f"JobId={run.job_id}", "TimeLimit=00:10:00"], check=True,
                   env=run.sandbox.env(), timeout=30)
    # The second attempt: the requeue hold, a bring-up twice as slow as the first one measured, the steps left.
    state = run.finish(timeout=120 + 2 * ran_s + 80)
    out = run.output()
    assert state == "COMPLETED", out[-6000:]
    print(f"time-limit run of {run.restarts() + 1} attempts: {time.monotonic() - started:.0f}s")

    first = run.attempt_log(0)
    assert "notice SIGUSR1 received" in first, first
    saved = int(re.search(r"checkpoint of step (\d+) saved on notice", first).group(1))
    assert 0 < saved < 80
    assert run.resumed_from()[0] == saved
    run.assert_every_step_once_after_resume()
    assert run.restarts() >= 1
    assert "TIMEOUT" not in [row["State"] for row in run.sacct_attempts()], run.sacct_attempts()
    assert run.marker() == 80


@pytest.mark.parametrize("max_requeues", [1, 0])
def test_worker_ray_killed_fails_fast(train_run, max_requeues):
    run = train_run(steps=10, ckpt_interval=3)
    # The requeue path: no restart in the allocation (tests/jobs/training/test_in_job_sandbox.py has those).
    run.submit("--time=00:10:00", overrides=(*QUICK, f"cluster.max_requeues={max_requeues}",
                                             "cluster.max_in_job_attempts=0"))
    run.wait_for_steps(4)
    worker_node = re.search(r"\[ray-node (n\d+) rank 1 ", run.output()).group(1)
    pid = wait_for(lambda: one_raylet(run.job_id, attempt=0, node=worker_node), 10, f"the raylet on {worker_node}")
    os.kill(pid, 9)
    killed = time.monotonic()
    first = wait_for(lambda: "infrastructure failure" in run.attempt_log(0) and run.attempt_log(0), 60,
                     "the train job to see the infrastructure failure")
    noticed_after = time.monotonic() - killed
    assert noticed_after < 45, f"the job must fail fast, not wait for timeouts ({noticed_after:.0f}s)"
    print(f"worker raylet killed -> job reacted in {noticed_after:.1f}s")
    assert f"infra failure on {worker_node}: node {worker_node}: this node's Ray (raylet) died" in first, first

    if max_requeues == 0:
        state = run.finish(timeout=90)
        assert state == "FAILED", run.output()[-4000:]
        assert "not requeueing, SLURM_RESTART_COUNT=0 reached max_requeues=0" in first, first
        assert run.sacct_attempts()[-1]["State"] == "FAILED"
        assert run.restarts() == 0
        assert run.marker() == max(run.checkpoints()) < 10
        assert not run.ray_left_running(), "a failed job must not leave the head's Ray behind"
        return
    state = run.finish(timeout=300)
    assert state == "COMPLETED", run.output()[-6000:]
    assert "infrastructure failure: job requeued" in first, first
    # No notice, so no save: the next attempt resumes from the last periodic checkpoint and redoes only what came
    # after it.
    last_periodic = max(step for step in run.checkpoints() if run.checkpoints()[step]["attempt"] == 0)
    assert run.resumed_from() == [last_periodic]
    run.assert_every_step_once_after_resume()
    assert run.restarts() == 1
    assert run.marker() == 10
    assert not run.ray_left_running()


def test_scancel_ends_the_job_and_is_never_taken_for_the_time_limit(train_run):
    # A user's scancel: Slurm marks the job COMPLETING with EndTime set to that moment, as at the time limit; the
    # job must end cancelled, not requeue itself.
    run = train_run(steps=30, ckpt_interval=100)
    run.submit("--time=00:10:00", overrides=QUICK)
    run.wait_for_steps(2)
    subprocess.run(["scancel", run.job_id], check=True, env=run.sandbox.env(), timeout=30)
    state = run.finish(timeout=120)
    assert state == "CANCELLED", run.attempt_log(0)
    # sacct says CANCELLED from the scancel on; the batch shell goes on logging until it has stopped the Ray step.
    first = wait_for(lambda: "not requeueing" in run.attempt_log(0) and run.attempt_log(0), 60,
                     "the batch shell's last words")
    assert "Slurm is ending this attempt (cancelled)" in first, first
    assert "requeued" not in first and run.restarts() in (0, -1), first
    assert len(run.sacct_attempts()) == 1, run.sacct_attempts()
