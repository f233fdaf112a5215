"""A 64-point sweep (4 x 4 x 4) on the Slurm sandbox: every point validated and submitted (one shared data job, 64
training jobs held at submission), `status` of the whole sweep with one squeue and one sacct call (counted by a test
double that wraps the real `scheduler.squeue_rows` / `scheduler.sacct_rows` and calls them), and a real 1-step
rehearsal on the sweep's first 2 points (their jobs released side by side on the lane's 4 nodes, the other 62
cancelled unstarted).

Timings are the benchmark's subject (tools/bench_submit.py), not this test's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_sandbox_pipeline import sandbox_run  # noqa: F401  (the fixture)
from train_runs import few_gpus

from beam_slurm.slurm import scheduler
from beam_slurm.verbs import status as status_mod
from beam_slurm.verbs import submit as submit_mod

pytestmark = pytest.mark.sandbox

AXES = ["algorithm.lr=1e-5,2e-5,3e-5,4e-5", "lora.rank=8,16,32,64", "generation.temperature=0.7,0.8,0.9,1.0"]
ONE_STEP = ["recipe=lora_16gpu", "trainer.backend=rehearsal", "max_training_steps=1", "checkpoint.interval=1",
            "cluster.time_limit=00:10:00", "cluster.signal_before_s=60", "cluster.grace_s=30",
            "cluster.stop_grace_s=20", "cluster.extra_sbatch_args=['--hold']",
            *few_gpus(2)]  # 2 of each node's GPUs: 4 rehearsal actors a run, not 16


class CountingScheduler:
    """Test double: counts the calls of the real squeue/sacct wrappers (and passes each call through to them)."""

    def __init__(self, monkeypatch):
        self.calls = {"squeue": 0, "sacct": 0}
        real_squeue, real_sacct = scheduler.squeue_rows, scheduler.sacct_rows

        def squeue_rows():
            self.calls["squeue"] += 1
            return real_squeue()

        def sacct_rows(*args, **kwargs):  # every reader of sacct goes through it (the ledger's too)
            self.calls["sacct"] += 1
            return real_sacct(*args, **kwargs)

        monkeypatch.setattr(scheduler, "squeue_rows", squeue_rows)
        monkeypatch.setattr(scheduler, "sacct_rows", sacct_rows)


def _status(target: str, capsys, counter: CountingScheduler) -> list[dict]:
    before = dict(counter.calls)
    assert status_mod.main([target, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["jobs"]
    assert {k: counter.calls[k] - before[k] for k in before} == {"squeue": 1, "sacct": 1}
    return rows


def test_64_point_sweep_submitted_with_status_in_one_squeue_and_one_sacct(slurm_sandbox, sandbox_run, capsys,
                                                                            monkeypatch):
    root, data, submitted = sandbox_run
    counter = CountingScheduler(monkeypatch)
    code = submit_mod.main(["-m", "--stages", "data,train", *ONE_STEP, *AXES, *data])
    out, err = capsys.readouterr()
    assert code == 0, err
    trains = [line.split()[2] for line in out.splitlines() if line.split()[:2] == ["train", "job"]]
    data_jobs = {line.split()[2].rstrip(",") for line in out.splitlines() if line.split()[:2] == ["data", "job"]}
    submitted += trains + sorted(data_jobs)
    assert len(trains) == 64 and len(set(trains)) == 64 and len(data_jobs) == 1, out
    sweep_dir = Path(out.strip().splitlines()[-1].split()[1])
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert len(record["runs"]) == 64 and len({r["run_name"] for r in record["runs"]}) == 64
    queued = subprocess.run(["squeue", "--noheader", "--states=all", "-o", "%i %r", f"--jobs={','.join(trains)}"],
                            env=slurm_sandbox.env(), capture_output=True, text=True, timeout=60).stdout.split("\n")
    held = {line.split()[0] for line in queued if line.split()[1:] == ["JobHeldUser"]}
    assert held == set(trains), queued

    rows = _status(str(sweep_dir), capsys, counter)
    assert len(rows) == 128 and {r["run"] for r in rows} == {r["run_name"] for r in record["runs"]}
    assert {r["job_id"] for r in rows if r["stage"] == "train"} == set(trains)
    assert all(r["state"] == "PENDING" for r in rows if r["stage"] == "train"), rows

    # The first 2 points run for real, at once on the lane's 4 nodes: 1 rehearsal step each, after the shared data job.
    first = trains[:2]
    subprocess.run(["scontrol", "release", ",".join(first)], env=slurm_sandbox.env(), check=True, timeout=60)
    for job in trains[2:]:
        slurm_sandbox.cancel(job)
    assert slurm_sandbox.wait(next(iter(data_jobs)), timeout=300) == "COMPLETED"
    for job in first:
        assert slurm_sandbox.wait(job, timeout=600) == "COMPLETED", slurm_sandbox.scontrol_job(job)

    rows = _status(str(sweep_dir), capsys, counter)
    train_rows = {r["job_id"]: r for r in rows if r["stage"] == "train"}
    assert all(train_rows[j]["state"] == "COMPLETED" and train_rows[j]["checkpoint"] == 1 and
               train_rows[j]["max_training_steps"] == 1 for j in first), rows
    assert all(train_rows[j]["state"] == "CANCELLED" for j in trains[2:]), rows
