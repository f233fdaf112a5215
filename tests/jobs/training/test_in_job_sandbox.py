"""Recovery inside the allocation on the Slurm sandbox instead of a requeue: warm (the head's Ray and the healthy
raylets stay up, a spare's raylet joins them) or cold when the head's node is the one lost; and a failure that would
repeat (checkpoint storage full) ending the job at once.

The real batch script (`#SBATCH --no-kill`), train CLI, train job, Ray across the nodes and the rehearsal trainer;
the faults are real: a raylet SIGKILLed, a node set DOWN in Slurm, a small file system under the checkpoints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from json_output_checks import assert_json_valid
from ray_processes import one_raylet, ray_processes, raylet_pids
from train_runs import wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

QUICK = ("cluster.grace_s=30", "cluster.signal_before_s=120")
SANDBOX_TOOL = Path(__file__).resolve().parents[3] / "tools" / "slurm_sandbox.py"


def job_nodes(sandbox, job_id: str) -> list[str]:
    listed = wait_for(lambda: (sandbox.scontrol_job(job_id).get("NodeList") or "").replace("(null)", ""), 240,
                      "the allocation", 0.2)
    return subprocess.run(["scontrol", "show", "hostnames", listed], capture_output=True, text=True,
                          env=sandbox.env(), check=True).stdout.split()


def record_attempts(run) -> list[dict]:
    record = json.loads((run.export_path / "beam_run" / "run.json").read_text())
    return record["train_jobs"][run.job_id]["attempts"]


def assert_never_requeued(run) -> None:
    assert run.restarts() == 0, run.output()[-4000:]
    states = [row["State"] for row in run.sacct_attempts()]
    assert not {"REQUEUED", "NODE_FAIL", "PREEMPTED"} & set(states), states


def head_processes(job_id: str, head: str) -> tuple[int, int]:
    """(raylet, GCS) pids of the job's first attempt's Ray on the head's node."""
    gcs = [int(line.split(":")[0]) for line in ray_processes(job_id) if "gcs_server" in line]
    return one_raylet(job_id, attempt=0, node=head), sorted(gcs)


def on_node(sandbox, node: str, *command: str) -> subprocess.CompletedProcess:
    """A command inside one sandbox node's namespaces (its mounts: a node-local file system)."""
    return subprocess.run([sys.executable, str(SANDBOX_TOOL), "--state-dir", str(sandbox.state_dir), "run",
                           "--node", node, "--", *command], capture_output=True, text=True, timeout=60)


def test_a_killed_worker_raylet_is_replaced_by_the_spare_without_a_requeue(train_run, slurm_sandbox):
    run = train_run(steps=8, ckpt_interval=2)
    run.submit("--time=00:10:00", "--nodes=3", overrides=(*QUICK, "cluster.spare_nodes=1"))
    nodes = job_nodes(slurm_sandbox, run.job_id)
    assert len(nodes) == 3, nodes
    run.wait_for_steps(3)
    first_log = run.attempt_log(0)
    assert f"2 nodes ({nodes[0]},{nodes[1]})" in first_log, first_log  # the spare takes no part
    worker = re.search(r"\[ray-node (n\d+) rank 1 ", run.output()).group(1)
    assert worker == nodes[1]
    head_ray = head_processes(run.job_id, nodes[0])
    os.kill(wait_for(lambda: one_raylet(run.job_id, attempt=0, node=worker), 10, f"the raylet on {worker}"), 9)
    # Warm: the spare's raylet (started by attempt 0.1) joins the head's Ray, which keeps its processes.
    wait_for(lambda: (0, 1) in run.steps_by_attempt(in_job=True), 150, "a step of attempt 0.1")
    assert head_processes(run.job_id, nodes[0]) == head_ray
    assert raylet_pids(run.job_id, attempt="0.1", node=nodes[2]), "no raylet of attempt 0.1 on the spare"

    assert run.finish(timeout=200) == "COMPLETED", run.output()[-6000:]
    assert_never_requeued(run)
    first = run.attempt_log(0)
    assert f"restarting in the job on {nodes[0]},{nodes[2]} ({worker} left out)" in first, first
    assert f"warm: the head's Ray and 0 other node(s) stay up; restarting a Ray node on {nodes[2]}" in first, first
    second = run.attempt_log("0.1")
    assert f"2 nodes ({nodes[0]},{nodes[2]})" in second, second
    run.assert_every_step_once_after_resume()
    assert run.marker() == 8
    attempts = record_attempts(run)
    assert [(a["attempt"], a["in_job"], a["end_kind"]) for a in attempts] == [(0, 0, "node-failure"),
                                                                               (0, 1, "finished")], attempts
    assert attempts[0]["decision"] == "restart in job" and attempts[1]["replaced"] == [f"{worker} -> {nodes[2]}"]
    status = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "status", str(run.export_path), "--json"],
                            capture_output=True, text=True, env=run.env(), timeout=120)
    assert status.returncode == 0, status.stderr
    assert_json_valid("status", json.loads(status.stdout))  # with a restart's phases
    shown = next(job for job in json.loads(status.stdout)["jobs"] if job["stage"] == "train")["attempts"]
    assert [(a["attempt"], a["in_job"], a["state"]) for a in shown] == [(0, 0, "node-failure"), (0, 1, "finished")]
    assert shown[1]["replaced"] == [f"{worker} -> {nodes[2]}"], shown
    # Where the restart's seconds went: every phase measured, the fault to the first resumed step.
    restart = shown[1]["restart"]
    phases = [restart[k] for k in ("detection", "stopping", "bring_up", "model_load", "first_step")]
    assert restart["warm"] and all(p is not None and p >= 0 for p in phases), restart
    assert abs(sum(phases) - restart["total"]) < 0.1 and restart["resumed_steps"] >= 3, restart


def test_when_the_heads_ray_dies_the_restart_in_the_job_is_cold(train_run, slurm_sandbox):
    run = train_run(steps=8, ckpt_interval=2)
    run.submit("--time=00:10:00", overrides=QUICK)
    nodes = job_nodes(slurm_sandbox, run.job_id)
    run.wait_for_steps(3)
    os.kill(wait_for(lambda: one_raylet(run.job_id, attempt=0, node=nodes[0]), 10, f"the raylet on {nodes[0]}"), 9)
    # Cold: the GCS went with the head's node, so every node starts a new Ray (attempt 0.1's folders).
    wait_for(lambda: (0, 1) in run.steps_by_attempt(in_job=True), 150, "a step of attempt 0.1")
    assert len(raylet_pids(run.job_id, attempt="0.1")) == 2 and not raylet_pids(run.job_id, attempt=0)

    assert run.finish(timeout=200) == "COMPLETED", run.output()[-6000:]
    assert_never_requeued(run)
    first = run.attempt_log(0)
    assert f"restarting in the job on {nodes[0]},{nodes[1]}" in first, first
    # Cold whether the batch shell saw the head's step end or the head's own failure first.
    assert re.search(rf"cold: the (head's Ray step on {nodes[0]} ended|failure is the head's \({nodes[0]}\))", first), first
    run.assert_every_step_once_after_resume()
    assert run.marker() == 8


@pytest.mark.slurm_semantics
def test_a_node_set_down_in_slurm_leaves_the_job_which_goes_on_without_it(train_run, slurm_sandbox):
    run = train_run(steps=8, ckpt_interval=2)
    run.submit("--time=00:10:00", "--nodes=3", overrides=(*QUICK, "cluster.spare_nodes=1"))
    nodes = job_nodes(slurm_sandbox, run.job_id)
    run.wait_for_steps(3)
    down = nodes[1]  # a worker, not the batch host
    env = slurm_sandbox.env()
    subprocess.run(["scontrol", "update", f"nodename={down}", "state=down", "reason=in-job test"], env=env,
                   check=True, timeout=30)
    try:
        assert run.finish(timeout=200) == "COMPLETED", run.output()[-6000:]
    finally:
        subprocess.run(["scontrol", "update", f"nodename={down}", "state=resume"], env=env, timeout=30)
    assert_never_requeued(run)
    first = run.attempt_log(0)
    assert f"Slurm removed {down} from the job" in first, first
    assert f"restarting in the job on {nodes[0]},{nodes[2]}" in first, first
    run.assert_every_step_once_after_resume()
    assert run.marker() == 8


def test_checkpoint_storage_that_fills_up_during_a_save_fails_the_job_at_once(train_run, slurm_sandbox):
    # A 2 MiB file system under the checkpoints on every node; each save writes 1.2 MiB: the second save fills it.
    run = train_run(steps=12, ckpt_interval=2)
    run.ckpt_path.mkdir(parents=True)
    nodes = slurm_sandbox.nodes
    mounted = [n for n in nodes if on_node(slurm_sandbox, n, "mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs",
                                           str(run.ckpt_path)).returncode == 0]
    assert mounted == list(nodes)
    try:
        run.submit("--time=00:10:00", overrides=(*QUICK, f"trainer.rehearsal_save_bytes={int(1.2 * 2**20)}"))
        assert run.finish(timeout=200) == "FAILED", run.output()[-6000:]
        head = job_nodes(slurm_sandbox, run.job_id)[0]
        marker = on_node(slurm_sandbox, head, "cat", str(run.ckpt_path / "latest_ckpt_global_step.txt"))
        listing = on_node(slurm_sandbox, head, "ls", str(run.ckpt_path / "global_step_2")).stdout.split()
    finally:
        for node in mounted:
            on_node(slurm_sandbox, node, "umount", "-l", str(run.ckpt_path))
    assert_never_requeued(run)
    first = run.attempt_log(0)
    assert "checkpoint storage full" in first and str(run.ckpt_path) in first, first
    assert "No space left on device" in first and "not requeueing" in first, first
    assert "the last complete checkpoint is kept (step 2)" in first, first
    assert marker.stdout.strip() == "2", marker
    assert "trainer_state.pt" in listing, listing
    assert run.sacct_attempts()[-1]["State"] == "FAILED"


def test_when_the_batch_host_fails_the_job_ends_node_fail_without_a_requeue(train_run, slurm_sandbox):
    # --no-kill treats the batch host like any other node: its failure takes the batch shell, and the job, with it.
    run = train_run(steps=40, ckpt_interval=2)
    run.submit("--time=00:10:00", overrides=QUICK)
    batch_host = job_nodes(slurm_sandbox, run.job_id)[0]
    run.wait_for_steps(3)
    env = slurm_sandbox.env()
    subprocess.run(["scontrol", "update", f"nodename={batch_host}", "state=down", "reason=batch host test"],
                   env=env, check=True, timeout=30)
    try:
        state = run.finish(timeout=120)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={batch_host}", "state=resume"], env=env, timeout=30)
    # Slurm removes the batch host (a RESIZING record), the batch shell dies with it and the job ends without a
    # requeue: FAILED on the sandbox (NODE_FAIL where the node's daemon is gone for good).
    states = [row["State"] for row in run.sacct_attempts()]
    assert state in ("FAILED", "NODE_FAIL") and "REQUEUED" not in states, (state, states)
    assert run.restarts() in (0, -1), states  # -1: Slurm has already forgotten the job
    assert "[beam-slurm train" not in run.attempt_log(0).split("starting the Ray step")[-1], run.attempt_log(0)

    def status():  # once squeue no longer lists the job COMPLETING
        return subprocess.run([sys.executable, "-m", "beam_slurm.cli", "status", str(run.export_path), "--json"],
                              capture_output=True, text=True, env=run.env(), timeout=120).stdout

    wait_for(lambda: "ended without a word from the batch shell" in status(), 60, "status to show the lost attempt")
