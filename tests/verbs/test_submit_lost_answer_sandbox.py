"""`submit` when sbatch's answer is lost, on the Slurm sandbox: a wrapper `sbatch` earlier on PATH runs the real one
and then reports the transport error a busy controller gives (the job exists: it is adopted), or reports it without
running the real one (no job: submitted again); and `submit` run twice for one run, which queues nothing the second
time unless --queue-anyway. The training jobs are held back by `--begin` (never start) and cancelled at the end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from beam_slurm.verbs import submit as submit_mod

pytestmark = [pytest.mark.sandbox, pytest.mark.slurm_semantics]

TIMED_OUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"


@pytest.fixture
def run_home(slurm_sandbox, monkeypatch):
    """A fresh HOME on the sandbox's shared folder and a unique run name; yields (root, train-only overrides) and
    cancels every job whose comment names that run."""
    root = slurm_sandbox.new_dir("lost-answer")
    for name in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "MAX_TRAINING_STEPS", "BEAM_SLURM_HOME",
                 "BEAM_TRAINER_BACKEND", "XDG_STATE_HOME", "BEAM_EXPORTS_ROOT"):
        monkeypatch.delenv(name, raising=False)
    for sub in ("model", "skyrl", "home", "data"):
        (root / sub).mkdir()
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("MODEL_PATH", str(root / "model"))
    monkeypatch.setenv("DATA_DIR", str(root / "data"))
    monkeypatch.setenv("SKYRL_DIR", str(root / "skyrl"))
    monkeypatch.setenv("SBATCH_MEM_PER_NODE", "300M")  # sandbox nodes have 8000 MB
    run_name = f"idem-{uuid.uuid4().hex[:8]}"
    overrides = ["--stages", "train", "recipe=lora_16gpu", f"run_name={run_name}", "trainer.backend=rehearsal",
                 "max_training_steps=4", "checkpoint.interval=2", "cluster.time_limit=00:10:00",
                 "cluster.signal_before_s=60", "cluster.grace_s=30", "cluster.stop_grace_s=20",
                 "cluster.check_paths_on_submit=false", "cluster.extra_sbatch_args=['--begin=now+7200']"]
    yield root, run_name, overrides
    for job_id in jobs_of(slurm_sandbox, run_name, every_point=True):
        slurm_sandbox.cancel(job_id)


def jobs_of(slurm_sandbox, run_name: str, *, active_only: bool = False, every_point: bool = False) -> list[str]:
    """Job ids whose comment holds a train token of this run (or of any sweep point of it: `every_point`), from raw
    squeue, all states unless active_only."""
    states = "--states=PENDING,RUNNING,CONFIGURING,SUSPENDED" if active_only else "--states=all"
    out = subprocess.run(["squeue", "--noheader", states, "--format=%A|%k"], capture_output=True, text=True,
                         env=slurm_sandbox.env(), timeout=60, check=True).stdout
    return sorted({line.split("|")[0] for line in out.splitlines()
                   if (f"beam-slurm:{run_name}" if every_point else f"beam-slurm:{run_name}:train:")
                   in line.split("|", 1)[-1]})


def sbatch_wrapper(directory: Path, body: str) -> Path:
    """A folder whose `sbatch` runs `body` for submissions (`--test-only` goes to the real sbatch unchanged)."""
    real = shutil.which("sbatch")
    assert real, "sbatch not on PATH"
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / "sbatch"
    wrapper.write_text(f'#!/bin/bash\nREAL={real}\nfor a in "$@"; do [ "$a" = --test-only ] && exec "$REAL" "$@"; '
                       f'done\necho "$@" >> {directory}/calls\n{body}\n')
    wrapper.chmod(0o755)
    return directory


def run_submit(argv, capsys):
    code = submit_mod.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_job_created_before_the_answer_was_lost_is_adopted(slurm_sandbox, run_home, capsys, monkeypatch):
    root, run_name, overrides = run_home
    wrapper = sbatch_wrapper(root / "bin", f'"$REAL" "$@" > /dev/null\necho "{TIMED_OUT}" >&2\nexit 1')
    monkeypatch.setenv("PATH", f"{wrapper}:{os.environ['PATH']}")
    code, out, err = run_submit(overrides, capsys)
    assert code == 0, err
    jobs = jobs_of(slurm_sandbox, run_name)
    assert len(jobs) == 1, (jobs, err)
    assert f"job {jobs[0]}" in err and "adopted" in err and "Socket timed out" in err, err
    assert f"train      job {jobs[0]}" in out, out
    assert len((wrapper / "calls").read_text().splitlines()) == 1  # sbatch ran once


def test_a_call_lost_before_the_job_was_created_is_submitted_again_once(slurm_sandbox, run_home, capsys,
                                                                         monkeypatch):
    root, run_name, overrides = run_home
    first = root / "bin" / "failed-once"
    body = f'if [ ! -e {first} ]; then touch {first}; echo "{TIMED_OUT}" >&2; exit 1; fi\nexec "$REAL" "$@"'
    wrapper = sbatch_wrapper(root / "bin", body)
    monkeypatch.setenv("PATH", f"{wrapper}:{os.environ['PATH']}")
    code, out, err = run_submit(overrides, capsys)
    assert code == 0, err
    jobs = jobs_of(slurm_sandbox, run_name)
    assert len(jobs) == 1, (jobs, err)
    assert "submitting again" in err and f"train      job {jobs[0]}" in out, (out, err)
    calls = (wrapper / "calls").read_text().splitlines()
    assert len(calls) == 2 and calls[0] == calls[1]  # the same command, the same token


def test_a_second_submit_of_a_queued_run_queues_nothing_unless_asked(slurm_sandbox, run_home, capsys):
    root, run_name, overrides = run_home
    code, out, err = run_submit(overrides, capsys)
    assert code == 0, err
    [job] = jobs_of(slurm_sandbox, run_name)
    code, out, err = run_submit(overrides, capsys)
    assert code == 1, (out, err)
    assert f"run {run_name} train: not queued again: job {job} is PENDING" in err and "--queue-anyway" in err, err
    assert jobs_of(slurm_sandbox, run_name) == [job]
    # Found by its token in squeue even when the run's record does not name it (an answer lost for good).
    (root / "home" / "exports" / run_name / "beam_run" / "run.json").unlink()
    code, out, err = run_submit(overrides, capsys)
    assert code == 1 and f"job {job} is PENDING" in err, err
    assert jobs_of(slurm_sandbox, run_name) == [job]
    code, out, err = run_submit(["--queue-anyway", *overrides], capsys)
    assert code == 0, err
    assert len(jobs_of(slurm_sandbox, run_name, active_only=True)) == 2


def test_a_sweep_stopped_half_way_lists_what_was_and_was_not_queued(slurm_sandbox, run_home, capsys, monkeypatch):
    """Slurm refuses the second point's job (a wrapper answers as Slurm does for a bad account): the first stays
    queued, the second and third are listed as not queued with why, exit 1, and every record says the same."""
    root, run_name, overrides = run_home
    count = root / "bin" / "count"
    refusal = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"
    body = (f'n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}\n'
            f'if [ $n = 2 ]; then echo "{refusal}" >&2; exit 1; fi\nexec "$REAL" "$@"')
    wrapper = sbatch_wrapper(root / "bin", body)
    monkeypatch.setenv("PATH", f"{wrapper}:{os.environ['PATH']}")
    code, out, err = run_submit(["-m", *overrides, "max_training_steps=4,5,6"], capsys)
    assert code == 1, (out, err)
    names = [f"{run_name}-max_training_steps_{steps}" for steps in (4, 5, 6)]
    jobs = {name: jobs_of(slurm_sandbox, name) for name in names}
    assert len(jobs[names[0]]) == 1 and jobs[names[1]] == jobs[names[2]] == [], jobs
    assert f"run {names[0]} train: queued as job {jobs[names[0]][0]}" in err, err
    assert f"run {names[1]} train: not queued: Slurm refused it" in err and "Invalid account" in err, err
    assert f"run {names[2]} train: not queued: submission stopped after the train stage of {names[1]}" in err, err
    assert "3 stage(s)" not in err and "2 stage(s) not queued" in err, err
    for name in names:
        stages = json.loads((root / "home" / "exports" / name / "beam_run" / "run.json").read_text())
        stage = stages["submissions"][-1]["stages"][0]
        if name == names[0]:
            assert (stage["status"], stage["job_id"]) == ("submitted", jobs[name][0]), stage
        else:
            assert stage["status"] == "not-queued" and stage["job_id"] is None and stage["reason"], stage
