"""`beam-slurm logs` finds a real job's batch log from Slurm's own answers: scontrol's StdOut while the controller
knows the job, then the --output of the submit line the accounting keeps (this sandbox's sacct has no StdOut field,
so the second question goes without it). One short plain-sbatch job whose submit line also holds
`--kill-on-invalid-dep=no`, an option an earlier reading took for `-o`. `logs --follow` of a held job waits for it
(saying so once) and prints its first line once it runs."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path

import pytest

from beam_slurm.cli import main as beam_slurm
from beam_slurm.core.run_record import StageEntry, Submission
from beam_slurm.core.run_store import RunStore, now, remember_job
from beam_slurm.launch.runs import find_job
from beam_slurm.slurm import scheduler
from beam_slurm.verbs import logs

pytestmark = pytest.mark.sandbox
REPO = Path(__file__).resolve().parents[2]


def test_the_batch_log_of_a_plain_sbatch_job_from_scontrol_then_from_sacct(slurm_sandbox, capsys):
    export = slurm_sandbox.new_dir("logs") / "exports"
    (export / "logs").mkdir(parents=True)
    job = slurm_sandbox.sbatch("#!/bin/bash\nfor i in $(seq 30); do printf '\\033[32mline %s\\033[0m\\n' $i; done\n",
                               "--nodes=1", "--time=2", "--job-name=beam-logs", "--kill-on-invalid-dep=no",
                               f"--output={export}/logs/train-%j.out")
    assert slurm_sandbox.wait(job, timeout=45) == "COMPLETED"
    RunStore(export).update(lambda run: run.begin_attempt(  # a record from before the job kept its StdOut
        job_id=job, attempt=0, nodes=["n5"], checkpoint=None, when=now(), partition="batch", nodes_needed=1,
        user_exclude=[]))
    (export / "logs" / f"{job}-0").mkdir()
    batch = export / "logs" / f"train-{job}.out"
    assert logs.batch_log(find_job(str(export))) == (batch, "scontrol StdOut")

    deadline, facts = time.monotonic() + 30, {}
    while "--output" not in facts.get("SubmitLine", "") and time.monotonic() < deadline:
        time.sleep(1)  # the accounting hears of the job shortly after it ended
        facts = scheduler.accounted_output(job)
    assert facts["source"] == "sacct" and facts["JobName"] == "beam-logs", facts
    assert logs.batch_log_candidates(find_job(str(export)), facts)[0] == (batch, "sacct SubmitLine")

    assert beam_slurm(["logs", str(export), "--lines", "3"]) == 0
    out = capsys.readouterr().out
    assert f"batch log of job {job}: {batch}" in out and "line 30\n" in out and "line 27" not in out
    assert "\x1b[" not in out


def test_follow_of_a_held_job_waits_then_prints_its_first_line(slurm_sandbox, monkeypatch):
    folder = slurm_sandbox.new_dir("follow")
    export = folder / "exports"
    (export / "logs").mkdir(parents=True)
    job = slurm_sandbox.sbatch("#!/bin/bash\necho 'first line'\nsleep 3\necho 'last line'\n", "--hold", "--nodes=1",
                               "--time=2", "--job-name=beam-follow", f"--output={export}/logs/train-%j.out")
    monkeypatch.setenv("XDG_STATE_HOME", str(folder / "state"))  # the job index `logs JOB` reads
    RunStore(export).update(lambda run: run.submissions.append(Submission(submitted_at=now(), stages=[
        StageEntry(stage="train", status="submitted", job_id=job)])))
    remember_job(job, export)
    follow = subprocess.Popen([sys.executable, "-m", "beam_slurm.cli", "logs", job, "--follow"], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=slurm_sandbox.env())
    waiting = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    try:
        said = waiting.submit(follow.stderr.readline).result(timeout=60)
        assert said.startswith(f"beam-slurm logs: job {job} is pending; waiting for it to start"), said
        time.sleep(2)
        assert follow.poll() is None  # still waiting: held jobs do not start
        subprocess.run(["scontrol", "release", job], env=slurm_sandbox.env(), check=True, timeout=60)
        assert waiting.submit(follow.stdout.readline).result(timeout=90) == "first line\n"
        out, err = follow.communicate(timeout=120)
        assert follow.returncode == 0, err
        assert out == "last line\n" and "pending" not in err  # said once
    finally:
        if follow.poll() is None:
            follow.kill()
        waiting.shutdown(wait=False)
    assert slurm_sandbox.wait(job, timeout=60) == "COMPLETED"
