"""The hang watchdog on the Slurm sandbox: a GPU actor that stops making progress (the rehearsal blocks one actor
for good, the trainer does not know), and a process of the job frozen with SIGSTOP from outside. Each is found
within its timeout plus the watchdog's poll, every node's stacks are saved in the attempt's hang/ folder, no
process of the attempt is left, and the run resumes from its last checkpoint and completes with every step once."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
from ray_processes import actor_pids, job_processes, raylet_pids
from train_runs import REPO_ROOT, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

TIMEOUT_S = 15
QUICK = ("cluster.grace_s=30", "cluster.signal_before_s=120", f"cluster.hang_timeout_s={TIMEOUT_S}",
         "trainer.rehearsal_save_s=0")
MARGIN_S = 6  # the watchdog reads the heartbeat every 2 s; a loaded sandbox adds a little
LIMIT_S = 600  # the jobs' time limit, which also bounds the waits: a loaded machine slows bring-up, not the verdicts


def hang_line(log: str) -> re.Match:
    match = re.search(r"hang at step (\d+) \((\w[\w-]*)\): no progress for (\d+) s \(limit (\d+) s\)", log)
    assert match, log[-3000:]
    return match


def attempts_of(run) -> list[dict]:
    status = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "status", str(run.export_path), "--json"],
                            capture_output=True, text=True, timeout=60, env=run.env(), cwd=REPO_ROOT)
    assert status.returncode == 0, status.stderr
    return next(job for job in json.loads(status.stdout)["jobs"] if job["stage"] == "train")["attempts"]


def test_an_actor_that_stops_making_progress_is_dumped_ended_and_the_run_resumes(train_run):
    # Every GPU of the nodes: the dumps are of every process, eight GPU actors a node among them.
    run = train_run(steps=10, ckpt_interval=3, step_seconds=1.0, gpus_per_node=8)
    run.submit(f"--time={LIMIT_S // 60}", overrides=(*QUICK, "trainer.rehearsal_hang_at_step=6", "cluster.max_in_job_attempts=0"))
    state = run.finish(timeout=LIMIT_S)
    assert state == "COMPLETED", run.output()[-6000:]
    first = run.attempt_log(0)
    found = hang_line(first)
    assert (found.group(1), found.group(2)) == ("6", "step"), found.group(0)
    assert int(found.group(3)) <= TIMEOUT_S + MARGIN_S, found.group(0)
    # Every node's stacks; the blocked actor is the one waiting elsewhere than the others, on the last node.
    hang_dir = run.export_path / "logs" / f"{run.job_id}-0" / "hang"
    nodes = sorted(p.name for p in hang_dir.iterdir() if p.is_dir())
    assert len(nodes) == 2, nodes
    # Ray's own account from the head's node (its state API is the dashboard's, off in these light runs: said so)
    head = json.loads((hang_dir.parent / "ray_head.json").read_text())["host"]
    assert [n for n in nodes if (hang_dir / n / "ray_actors.txt").exists()] == [head], nodes
    assert "ray.include_dashboard=false" in (hang_dir / head / "ray_actors.txt").read_text()
    for node in nodes:
        rows = json.loads((hang_dir / node / "processes.json").read_text())
        dumped = [r for r in rows if r.get("dump") and not r.get("error")]
        assert len(dumped) >= 8, rows  # eight GPU actors a node, plus Ray's Python processes
        assert all("Thread" in (hang_dir / node / r["dump"]).read_text() for r in dumped)
    # The rehearsal blocks the actor of the last bundle: its node is the suspect.
    placement = json.loads((run.export_path / "rehearsal" / "placement_attempt_0.json").read_text())
    blocked = placement[-1]["hostname"]
    assert f"ray::GpuSlot.step (pid " in first and f"on {blocked} is in place_actors.<locals>.GpuSlot.step " \
        "(rehearsal.py) while 15 others of ray::GpuSlot wait" in first, first[-3000:]
    assert f"hang at step 6 (step) on {blocked}: job requeued" in first, first[-3000:]
    # The run resumes from the checkpoint before the hang, on nodes without the suspect, and finishes.
    assert run.resumed_from() == [3]
    run.assert_every_step_once_after_resume()
    assert "hang" not in run.attempt_log(1).lower(), run.attempt_log(1)  # steady steps are never taken for a hang
    hung, done = attempts_of(run)[:2]
    assert hung["state"] == "hang" and hung["hang_dumps"].startswith(str(hang_dir)), hung
    assert blocked not in done["nodes"], (blocked, done)
    assert not job_processes(run.job_id), job_processes(run.job_id)


@pytest.mark.slurm_semantics
def test_a_process_frozen_with_sigstop_is_found_continued_and_ended(train_run):
    run = train_run(steps=10, ckpt_interval=3, step_seconds=1.0)
    run.submit(f"--time={LIMIT_S // 60}", overrides=QUICK)  # restarted in the job (cluster.max_in_job_attempts)
    run.wait_for_steps(3)
    worker = re.search(r"\[ray-node (n\d+) rank 1 ", run.output()).group(1)
    pid = wait_for(lambda: next(iter(actor_pids(run.job_id, "ray::GpuSlot", worker)), None), 20,
                   f"a GPU actor on {worker}")
    raylets, actors = raylet_pids(run.job_id, attempt=0), actor_pids(run.job_id, "ray::GpuSlot")
    assert len(raylets) == 2, raylets
    os.kill(pid, signal.SIGSTOP)  # alive and silent; its SIGTERM stays pending until it is continued
    # Warm: only the driver and its actors restart; both nodes' Ray keep their processes.
    wait_for(lambda: (0, 1) in run.steps_by_attempt(in_job=True), LIMIT_S / 2, "a step of attempt 0.1")
    assert raylet_pids(run.job_id) == raylets
    again = actor_pids(run.job_id, "ray::GpuSlot")
    assert again and not set(again) & set(actors), (actors, again)
    state = run.finish(timeout=LIMIT_S)
    assert state == "COMPLETED", run.output()[-6000:]
    first = run.attempt_log(0)
    found = hang_line(first)
    assert int(found.group(3)) <= TIMEOUT_S + MARGIN_S, found.group(0)
    assert f"(pid {pid}) on {worker} is stopped" in first, first[-3000:]
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    assert run.resumed_from() and run.resumed_from()[0] == max(
        s for s, st in run.checkpoints().items() if (st["attempt"], st.get("in_job", 0)) == (0, 0))
    run.assert_every_step_once_after_resume()
    assert not job_processes(run.job_id), job_processes(run.job_id)
    # Recovered inside the allocation: the node is healthy once the process is gone, so the same two nodes go on.
    assert "restarting in the job on" in first and run.restarts() == 0, first[-3000:]
    assert "warm: the head's Ray and 1 other node(s) stay up; restarting the driver alone" in first, first[-3000:]
    # The worker checked that the stopped driver's processes (the frozen actor among them) were gone from it.
    assert "warm restart: this node is clean" in run.output() and "NOT clean" not in run.output(), run.output()[-3000:]
