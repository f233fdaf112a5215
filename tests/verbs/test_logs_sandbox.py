"""`beam-slurm logs` finds a real job's batch log from Slurm's own answers: scontrol's StdOut while the controller
knows the job, then the --output of the submit line the accounting keeps (this sandbox's sacct has no StdOut field,
so the second question goes without it). One short plain-sbatch job whose submit line also holds
`--kill-on-invalid-dep=no`, an option an earlier reading took for `-o`."""

from __future__ import annotations

import time

import pytest

from beam_slurm.cli import main as beam_slurm
from beam_slurm.core.run_store import RunStore, now
from beam_slurm.launch.runs import find_job
from beam_slurm.slurm import scheduler
from beam_slurm.verbs import logs

pytestmark = pytest.mark.sandbox


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
