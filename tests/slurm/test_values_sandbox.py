"""Our reading of `--time` against Slurm's own: held jobs submitted with each form, and the TimeLimit scontrol reports
for them (Slurm rounds seconds up to the minute). Nothing runs: the jobs are held, then cancelled."""
from __future__ import annotations

import pytest

from beam_slurm.slurm.values import reported_seconds, time_limit_seconds

pytestmark = pytest.mark.sandbox

FORMS = ["30:00", "90", "45", "0:30", "4:00", "0:04:00", "1:30:00", "1-00", "2-12", "1-2:30", "1-00:00:01", "120:00"]


def test_time_limits_read_as_slurm_reads_them(slurm_sandbox):
    jobs = {form: slurm_sandbox.sbatch("#!/bin/bash\ntrue\n", "--hold", f"--time={form}", "--nodes=1")
            for form in FORMS}
    try:
        reported = {form: slurm_sandbox.scontrol_job(job)["TimeLimit"] for form, job in jobs.items()}
    finally:
        for job in jobs.values():
            slurm_sandbox.cancel(job)
    ours = {form: time_limit_seconds(form) for form in FORMS}
    slurms = {form: reported_seconds(text) for form, text in reported.items()}
    assert ours == slurms, {form: (ours[form], reported[form]) for form in FORMS if ours[form] != slurms[form]}
