"""`submit -m` of an 8-point sweep while the controller stops answering: slurmctld is stopped with SIGSTOP for 30 s
(SIGCONT in a `finally`, always) in the middle of the submissions, so an sbatch call's answer is lost (its request may
or may not have been read). Afterwards each point's training job exists exactly once, the sweep's records name the
jobs Slurm has, and `submit` exits 0, or 1 listing exactly what was not queued. It stops the controller for every
lane, so it is marked whole_cluster (runs alone). The 24.11 sandbox's slurmctld (another state folder) is never
touched: the pid comes from this sandbox's own pid file and is checked against its slurm.conf."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.sandbox, pytest.mark.whole_cluster]

REPO_ROOT = Path(__file__).resolve().parents[2]
STOPPED_S = 30
POINTS = [3, 4, 5, 6, 7, 8, 9, 10]  # max_training_steps of each point


def controller_pid(slurm_sandbox) -> int:
    """This sandbox's slurmctld (its pid file), checked to run with this sandbox's slurm.conf."""
    pid = int((slurm_sandbox.state_dir / "run" / "slurmctld.pid").read_text().split()[0])
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert Path(command[0].decode()).name == "slurmctld" and str(slurm_sandbox.slurm_conf).encode() in command, command
    return pid


def tokens_by_run(slurm_sandbox, prefix: str) -> dict[str, list[str]]:
    """run name -> ids of the jobs whose comment holds a train token of it (raw squeue, all states)."""
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%A|%k"], capture_output=True, text=True,
                         env=slurm_sandbox.env(), timeout=120, check=True).stdout
    found: dict[str, set[str]] = {}
    for line in out.splitlines():
        job_id, _, comment = line.partition("|")
        for word in comment.split():
            parts = word.split(":")
            if len(parts) == 4 and parts[0] == "beam-slurm" and parts[1].startswith(prefix) and parts[2] == "train":
                found.setdefault(parts[1], set()).add(job_id)
    return {run: sorted(ids) for run, ids in found.items()}


def test_sweep_submitted_while_the_controller_is_stopped(slurm_sandbox):
    root = slurm_sandbox.new_dir("ctld-stopped")
    for sub in ("model", "skyrl", "home", "data", "bin"):
        (root / sub).mkdir()
    # A busy controller: each submission takes a second, so the stop lands between the sweep's first and last.
    real = shutil.which("sbatch")
    (root / "bin" / "sbatch").write_text(f'#!/bin/bash\nfor a in "$@"; do [ "$a" = --test-only ] && exec {real} "$@"; '
                                         f'done\nsleep 1\nexec {real} "$@"\n')
    (root / "bin" / "sbatch").chmod(0o755)
    env = {k: v for k, v in slurm_sandbox.env().items()
           if k not in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "MAX_TRAINING_STEPS",
                        "BEAM_SLURM_HOME", "BEAM_TRAINER_BACKEND", "XDG_STATE_HOME", "BEAM_EXPORTS_ROOT")}
    env.update(HOME=str(root / "home"), MODEL_PATH=str(root / "model"), DATA_DIR=str(root / "data"),
               SKYRL_DIR=str(root / "skyrl"), SBATCH_MEM_PER_NODE="300M", PATH=f"{root / 'bin'}:{env['PATH']}",
               PYTHONPATH=str(REPO_ROOT))  # this checkout, whichever one the virtual environment points at
    base = f"stop-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "beam_slurm.cli", "submit", "-m", "--stages", "train", "recipe=lora_16gpu",
            f"run_name={base}", "trainer.backend=rehearsal", f"max_training_steps={','.join(map(str, POINTS))}",
            "checkpoint.interval=2", "cluster.time_limit=00:10:00", "cluster.signal_before_s=60",
            "cluster.grace_s=30", "cluster.stop_grace_s=20", "cluster.check_paths_on_submit=false",
            "cluster.extra_sbatch_args=['--begin=now+7200']"]
    pid = controller_pid(slurm_sandbox)
    started = time.monotonic()
    with open(root / "out", "w") as out, open(root / "err", "w") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=root)
    try:
        try:
            while not tokens_by_run(slurm_sandbox, base) and proc.poll() is None:
                time.sleep(0.2)
            assert proc.poll() is None, "submit ended before any job could be seen"
            os.kill(pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            time.sleep(STOPPED_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        code = proc.wait(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
        jobs = tokens_by_run(slurm_sandbox, base)
        for ids in jobs.values():
            for job_id in ids:
                slurm_sandbox.cancel(job_id)
    stdout, stderr = (root / "out").read_text(), (root / "err").read_text()
    print(f"stopped {stopped_at - started:.1f} s after the start; submit took {time.monotonic() - started:.1f} s")
    print(stderr)
    assert code in (0, 1), stderr
    names = [f"{base}-max_training_steps_{steps}" for steps in POINTS]
    assert all(len(jobs.get(name, [])) <= 1 for name in names), jobs  # never twice
    sweep_dir = Path(next(line.split()[1] for line in stdout.splitlines() if line.startswith("sweep ")))
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert [r["run_name"] for r in record["runs"]] == names
    not_queued = [name for name in names if f"run {name} train: not queued" in stderr]
    for run in record["runs"]:
        stage = json.loads((Path(run["run_dir"]) / "run.json").read_text())["submissions"][-1]["stages"][0]
        if run["run_name"] in not_queued:
            assert stage["status"] == "not-queued" and not jobs.get(run["run_name"]), (stage, jobs)
        else:
            assert stage["status"] == "submitted" and [stage["job_id"]] == jobs.get(run["run_name"]), (stage, jobs)
            assert stage["token"] and stage["token"].startswith(f"beam-slurm:{run['run_name']}:train:")
    assert (code == 1) == bool(not_queued), (code, stderr)
    assert "Socket timed out" in stderr or "did not answer" in stderr, stderr  # the stop did reach a submission
