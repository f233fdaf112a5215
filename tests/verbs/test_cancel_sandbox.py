"""`beam-slurm cancel SWEEP` on the sandbox: a two-point sweep queued for real (held back by --begin, so nothing
starts), refused without --yes where there is no terminal, declined on one, then cancelled as one: squeue forgets the jobs, sacct
says CANCELLED, each run's record notes the cancel, and the sweep's points shared one W&B group."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from json_output_checks import assert_json_valid

pytestmark = pytest.mark.sandbox

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_sweep_is_cancelled_with_one_command(slurm_sandbox, run_env):
    root, _ = run_env
    env = slurm_sandbox.env()
    env.pop("BEAM_EXPORTS_ROOT", None)

    def beam(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "beam_slurm.cli", *args], cwd=REPO_ROOT, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)

    submitted = beam("submit", "-m", "--stages", "train", "--json", "recipe=lora_16gpu", "trainer.backend=rehearsal",
                     "container.runtime=none", "cluster.check_paths_on_submit=false", "max_training_steps=4,6",
                     "cluster.extra_sbatch_args=['--begin=now+1hour']", "trainer.logger=wandb")
    assert submitted.returncode == 0, submitted.stderr
    answer = json.loads(submitted.stdout)
    trains = [run["stages"][0]["job_id"] for run in answer["runs"]]
    slurm_sandbox.submitted.extend(trains)
    assert_json_valid("submit", answer)
    assert len(set(trains)) == 2 and all(t.isdigit() for t in trains), answer
    commands = [run["stages"][0]["command"] for run in answer["runs"]]
    group = Path(answer["sweep_dir"]).name
    assert all(f"trainer.wandb_group={group}" in c for c in commands), commands

    def trains_in_status() -> list[dict]:
        shown = beam("status", answer["sweep_dir"], "--json")
        assert shown.returncode == 0, shown.stderr
        assert_json_valid("status", json.loads(shown.stdout))
        return [job for job in json.loads(shown.stdout)["jobs"] if job["stage"] == "train"]

    pending = trains_in_status()
    assert [(j["job_id"], j["state"], j["checkpoint"], j["attempts"]) for j in pending] == [
        (t, "PENDING", None, []) for t in trains], pending
    assert all(j["reason"] == "BeginTime" and j["restarts"] == 0 and j["max_training_steps"] in (4, 6) for j in pending)

    refused = beam("cancel", answer["sweep_dir"])
    assert refused.returncode == 2 and "pass --yes" in refused.stderr, refused.stderr
    assert all(slurm_sandbox.scontrol_job(t).get("JobState") == "PENDING" for t in trains)

    # On a terminal it asks; anything but yes cancels nothing.
    terminal, typist = pty.openpty()
    os.write(typist, b"n\n")
    declined = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "cancel", answer["sweep_dir"]], cwd=REPO_ROOT,
                              env=env, stdin=terminal, capture_output=True, text=True, timeout=120)
    os.close(terminal), os.close(typist)
    assert declined.returncode == 1 and "cancel these 2 job(s)? [y/N]" in declined.stdout, declined
    assert "nothing cancelled" in declined.stdout and all(t in declined.stdout for t in trains), declined.stdout
    assert all(slurm_sandbox.scontrol_job(t).get("JobState") == "PENDING" for t in trains)

    done = beam("cancel", answer["sweep_dir"], "--yes")
    assert done.returncode == 0, done.stderr
    assert all(t in done.stdout for t in trains) and "cancelled 2 job(s) of 2 run(s)" in done.stdout, done.stdout
    queued = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(trains)], env=env, capture_output=True,
                            text=True, timeout=60)
    assert not queued.stdout.strip(), queued.stdout
    for run, train in zip(answer["runs"], trains):
        assert slurm_sandbox.wait(train, timeout=60) == "CANCELLED"
        record = json.loads((Path(run["export_path"]) / "beam_run" / "run.json").read_text())
        assert record["cancels"][-1]["job_ids"] == [train] and record["cancels"][-1]["states"] == {train: "PENDING"}
    ended = trains_in_status()
    assert all(j["state"] == "CANCELLED" and "with beam-slurm cancel" in j["reason"] for j in ended), ended
    again = beam("cancel", answer["sweep_dir"], "--yes")
    assert again.returncode == 0 and "nothing to cancel" in again.stdout, again.stdout + again.stderr
