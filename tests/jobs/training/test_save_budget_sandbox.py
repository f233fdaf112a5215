"""Saves that take real time, under a preemption of the sandbox's `low` partition (GraceTime 20 s, KillWait 10 s).

Real Slurm, real Ray, the real batch script and the rehearsal trainer with its save cost turned up
(`trainer.rehearsal_save_s`, `trainer.rehearsal_save_bytes`: bytes really written and fsynced). A preemption sends
USR1 to the batch shell at once (preempt_send_user_signal) and SIGTERM at the end of the grace time.

What the first SIGTERM of a preemption reaches was checked on this sandbox with a job whose batch shell and srun
step both log the signals they get: with the job's `--signal=B:USR1@N`, the batch shell gets USR1 + SIGCONT at once
and the step nothing; without `--signal`, the first SIGTERM (+ SIGCONT) reaches only the step's tasks, never the
batch shell, which hears SIGCONT + SIGTERM only at the end of the grace time (seen 30 s after the preemption for
GraceTime=20). When the save fits in the grace time, the Ray step holds that SIGTERM (node tasks and driver) and the
head relays it to the batch shell as a notice; the third case runs a job without `--signal` to check that.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from train_runs import REPO_ROOT, TRAIN_SCRIPT, wait_for

from beam_slurm.slurm.preemption import read_preemption

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


def preempt(run) -> str:
    """A `high` job on the run's nodes; returns its id once it completed."""
    nodes = run.sandbox.scontrol_job(run.job_id)["NodeList"]
    high = run.sandbox.sbatch("#!/bin/bash\nsleep 5\n", "-p", run.sandbox.partition("high"), "-N2", f"--nodelist={nodes}", "--exclusive",
                              "--time=00:02:00", f"--output={run.work}/high-%j.out")
    assert run.sandbox.wait(high, timeout=180) == "COMPLETED"
    return high


def preempt_after_steps(run, steps: int) -> tuple[str, float]:
    """Preempt the run once it logged `steps` steps; it must then complete. (its output, seconds from the preemption)"""
    run.wait_for_steps(steps)
    preempted = time.monotonic()
    preempt(run)
    state = run.finish(timeout=300)
    out = run.output()
    assert state == "COMPLETED", out[-6000:]
    return out, time.monotonic() - preempted


def plan_preemption_line(run, overrides) -> str:
    proc = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "plan", "recipe=lora_16gpu",
                           f"cluster.partition={run.sandbox.partition('low')}",
                           "cluster.check_paths_on_submit=false", *overrides, "--json"],
                          capture_output=True, text=True, env=run.env(), cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    row = next(r for r in json.loads(proc.stdout)["rows"] if (r["section"], r["item"]) == ("notice", "preemption"))
    return " ".join([row["text"], *(["; or ".join(row["fix"])] if "fix" in row else [])])


def save_seconds(out: str, step: int) -> float | None:
    match = re.search(rf"\[rehearsal\] saved step {step} in ([\d.]+) s", out)
    return float(match.group(1)) if match else None


def sandbox_low():
    low = read_preemption("low")
    assert low.reachable and low.user_signal and low.preemptable(), low
    return low


def test_a_save_longer_than_killwait_completes_within_the_grace_time(train_run):
    low = sandbox_low()
    save_s = 13.0
    assert low.kill_wait_s < save_s < low.grace_s(), "the case needs KillWait < save < GraceTime"
    # No periodic saves: the notice's save and the final one only; the preflight measures the storage.
    run = train_run(steps=8, ckpt_interval=100, measure_preflight=True)
    overrides = ("cluster.grace_s=30", "cluster.signal_before_s=120", f"trainer.rehearsal_save_s={save_s}",
                 "trainer.rehearsal_save_bytes=200000000")
    line = plan_preemption_line(run, overrides)
    assert line.endswith(f"step 1 s + save 13 s = 14 s <= lead {low.grace_s()} s: fits"), line
    run.submit("-p", run.sandbox.partition("low"), "--time=00:10:00", overrides=overrides)
    out, seconds = preempt_after_steps(run, 3)
    print(f"preemption -> save of {save_s:g} s -> requeue -> resume -> done: {seconds:.0f}s")

    first = run.attempt_log(0)
    saved = int(re.search(r"checkpoint of step (\d+) saved on notice", first).group(1))
    took = save_seconds(out, saved)
    assert took is not None and low.kill_wait_s < took < low.grace_s(), (took, out[-4000:])
    assert run.checkpoints()[saved]["attempt"] == 0
    assert run.resumed_from()[0] == saved
    run.assert_every_step_once_after_resume()  # no step redone
    assert run.marker() == 8
    storage = json.loads((run.export_path / "logs" / f"{run.job_id}-0" / "storage_write.json").read_text())
    rates = {host: r["write"]["gbytes_per_s"] for host, r in storage.items()}
    assert len(rates) == 2 and all(rate > 0 for rate in rates.values()), storage
    print(f"preflight write bandwidth per node, 2 nodes at once: {rates} GB/s")
    # The stop after the save is timed for the budget, which uses it from then on instead of the allowances.
    stop = json.loads((run.export_path / "logs" / f"{run.job_id}-0" / "ray_stop.json").read_text())
    assert 0 < stop["seconds"] < 60 and f"the Ray step stopped in {stop['seconds']:.1f}s" in first, (stop, first)
    print(f"stopping the Ray step after the save took {stop['seconds']:.1f}s")
    assert re.search(r"storage writes [\d.]+ GB/s per node at the slowest", first), first


def test_a_save_longer_than_the_grace_time_is_flagged_and_never_resumed_from(train_run):
    low = sandbox_low()
    # Slurm ends the grace time on its own period (seen 30-40 s after the preemption for GraceTime 20 + KillWait 10),
    # so the save lasts well past that: the kill always comes first.
    save_s = 90.0
    assert save_s > 2 * (low.grace_s() + low.kill_wait_s), "the case needs a save that outlasts the grace time"
    # 3 s steps: with the preemption sent as soon as step 3 is saved, the notice's save lands at step 4 or 5, between
    # the periodic (and final) saves of steps 3 and 6, unless the USR1 takes more than 6 s.
    run = train_run(steps=6, ckpt_interval=3, step_seconds=3.0)
    overrides = ("cluster.grace_s=120", "cluster.signal_before_s=180", f"trainer.rehearsal_save_s={save_s}",
                 "trainer.rehearsal_save_bytes=100000000")
    line = plan_preemption_line(run, overrides)
    assert f"DOES NOT FIT: step 3 s + save 90 s = 93 s > lead {low.grace_s()} s" in line, line
    assert "resumes from the last complete checkpoint" in line
    run.submit("-p", run.sandbox.partition("low"), "--time=00:10:00", overrides=overrides)
    wait_for(lambda: run.marker() == 3, 300, "the periodic checkpoint of step 3")
    preempt(run)  # at once: the USR1 may take a few seconds, and the notice's save must come before step 6
    # The verdict is where the next attempt resumed: once it trained its first step the job is cancelled (its final
    # save would take another 90 s and tell nothing more).
    wait_for(lambda: any(attempt > 0 for attempt in run.steps_by_attempt()), 420, "the next attempt's first step")
    run.sandbox.cancel(run.job_id)
    assert run.finish(timeout=180) == "CANCELLED"
    out = run.output()

    cut = [int(s) for s in re.findall(r"\[rehearsal\] saving step (\d+):", out) if int(s) not in (3, 6)]
    assert cut, out[-4000:]
    step = cut[0]
    assert save_seconds(out, step) is None, "the save on notice must have been cut off"
    half = run.ckpt_path / f"global_step_{step}"
    assert (half / "policy" / "rehearsal_weights.bin").exists() and not (half / "trainer_state.pt").exists()
    assert step not in run.checkpoints()
    assert "no checkpoint saved on notice" in run.attempt_log(0) or "stopping without waiting" in run.attempt_log(0)
    assert run.resumed_from()[0] == 3, "the next attempt resumes from the last complete checkpoint"
    by_attempt = run.steps_by_attempt()
    assert by_attempt[max(by_attempt)][0] == 4 and step in by_attempt[0], by_attempt


def test_a_preemption_whose_only_signal_is_sigterm_to_the_tasks_still_saves(train_run):
    # A copy of the batch script without `#SBATCH --signal`: the preemption sends no user signal, only the first
    # SIGTERM to the Ray step's tasks, GraceTime before the kill.
    low = sandbox_low()
    run = train_run(steps=8, ckpt_interval=100, extra_env={"BEAM_SLURM_HOME": str(REPO_ROOT)})
    lines = TRAIN_SCRIPT.read_text().splitlines(keepends=True)
    assert any(line.startswith("#SBATCH --signal=") for line in lines)
    run.script = run.work / "train_without_signal.sh"
    run.script.write_text("".join(line for line in lines if not line.startswith("#SBATCH --signal=")))
    run.submit("-p", run.sandbox.partition("low"), "--time=00:10:00", overrides=("cluster.grace_s=30", "trainer.rehearsal_save_s=4"))
    out, seconds = preempt_after_steps(run, 3)
    print(f"preemption by SIGTERM only -> relayed notice -> save -> requeue -> done: {seconds:.0f}s")

    first = run.attempt_log(0)
    assert f"a preemption's SIGTERM to the tasks is held as a notice: step 1 s + save 4 s = 5 s <= GraceTime " \
           f"{low.grace_s()} s" in first, first
    assert "notice SIGUSR1 received (the preemption's SIGTERM to the tasks, relayed by the Ray head)" in first, first
    relayed = json.loads((run.export_path / "logs" / f"{run.job_id}-0" / "sigterm_relayed.json").read_text())
    assert relayed["preempt_time"] and relayed["held_at"] <= relayed["time"], relayed
    assert "SIGTERM held" in out and "relayed to the batch shell as a notice" in out, out[-6000:]
    saved = int(re.search(r"checkpoint of step (\d+) saved on notice", first).group(1))
    assert run.checkpoints()[saved]["attempt"] == 0
    assert run.resumed_from()[0] == saved
    run.assert_every_step_once_after_resume()  # no step redone
    assert run.marker() == 8
