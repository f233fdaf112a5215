"""Chained evaluation: one submission per complete checkpoint, across racing watchers and restarts.

`submit` here records each call in a file shared by the racing processes instead of calling sbatch: the
property under test is the claim protocol on the filesystem, which does not depend on what submit does.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from beam_slurm.jobs.evaluation.checkpoints import STEP_DIR
from beam_slurm.launch.chain import ChainSettings, claim_path, complete_checkpoints, submit_pending, try_claim, watch


def submitted_jobs(settings: ChainSettings) -> dict[int, str | None]:
    """step -> evaluation job id (None while a claim has no job yet), from the claim files."""
    jobs: dict[int, str | None] = {}
    for path in settings.claims_dir.glob("global_step_*.json"):
        match = STEP_DIR.match(path.stem)
        try:
            jobs[int(match.group(1))] = json.loads(path.read_text()).get("job_id")
        except (OSError, ValueError):
            jobs[int(match.group(1))] = None
    return dict(sorted(jobs.items()))


def make_ckpt(run: Path, step: int) -> Path:
    path = run / f"global_step_{step}" / "policy"
    path.mkdir(parents=True)
    (path.parent / "trainer_state.pt").write_bytes(b"x")
    return path.parent


def set_marker(run: Path, step: int) -> None:
    (run / "latest_ckpt_global_step.txt").write_text(str(step))


def make_export(run: Path, step: int, age_s: float = 0.0) -> Path:
    policy = run / f"global_step_{step}" / "policy"
    policy.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (policy / name).write_text("{}")
        os.utime(policy / name, (time.time() - age_s, time.time() - age_s))
    return policy.parent


def recording_submit(log_file: Path):
    def submit(step: int, checkpoint: Path) -> str:
        with open(log_file, "a") as handle:  # O_APPEND: whole lines even from racing processes
            handle.write(json.dumps({"pid": os.getpid(), "step": step, "checkpoint": str(checkpoint)}) + "\n")
        return f"job-{os.getpid()}-{step}"
    return submit


def test_marker_decides_which_checkpoints_are_complete(tmp_path):
    run = tmp_path / "ckpts"
    for step in (10, 20, 30):
        make_ckpt(run, step)
    settings = ChainSettings(run_dir=run)
    set_marker(run, 20)  # step 30 is still being written
    assert [step for step, _ in complete_checkpoints(settings)] == [10, 20]
    calls = tmp_path / "calls.jsonl"
    submitted = submit_pending(settings, recording_submit(calls))
    assert [step for step, _ in submitted] == [10, 20]
    first = [json.loads(line) for line in calls.read_text().splitlines()]
    assert (first[0]["step"], first[0]["checkpoint"]) == (10, str(run / "global_step_10"))
    # Next poll: nothing new until the marker moves on; then only step 30.
    assert submit_pending(settings, recording_submit(calls)) == []
    set_marker(run, 30)
    assert [step for step, _ in submit_pending(settings, recording_submit(calls))] == [30]
    assert list(submitted_jobs(settings)) == [10, 20, 30]
    assert all(job for job in submitted_jobs(settings).values())


def test_exports_count_once_complete_and_settled(tmp_path):
    run = tmp_path / "exports"
    make_export(run, 5, age_s=120)
    make_export(run, 10, age_s=0)  # just written: may still be changing
    (run / "global_step_15" / "policy").mkdir(parents=True)  # no files yet
    settings = ChainSettings(run_dir=run, settle_s=60)
    assert [step for step, _ in complete_checkpoints(settings)] == [5]
    assert [step for step, _ in complete_checkpoints(settings, now=time.time() + 61)] == [5, 10]


def _race(run: str, claims: str, calls: str, start_at: float) -> None:
    while time.time() < start_at:  # line the processes up so they really race
        time.sleep(0.001)
    submit_pending(ChainSettings(run_dir=Path(run), claims_dir=Path(claims)), recording_submit(Path(calls)))


def test_racing_watchers_submit_each_checkpoint_exactly_once(tmp_path):
    run = tmp_path / "ckpts"
    for step in range(1, 21):
        make_ckpt(run, step)
    set_marker(run, 20)
    calls = tmp_path / "calls.jsonl"
    start_at = time.time() + 1.0
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_race, args=(str(run), str(tmp_path / "claims"), str(calls), start_at))
             for _ in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    steps = [json.loads(line)["step"] for line in calls.read_text().splitlines()]
    assert sorted(steps) == list(range(1, 21))  # none twice, none skipped
    jobs = submitted_jobs(ChainSettings(run_dir=run, claims_dir=tmp_path / "claims"))
    assert sorted(jobs) == list(range(1, 21)) and all(jobs.values())


def test_failed_submission_is_retried_and_dead_claims_are_taken_over(tmp_path, log_lines):
    run = tmp_path / "ckpts"
    make_ckpt(run, 10)
    make_ckpt(run, 20)
    set_marker(run, 20)
    settings = ChainSettings(run_dir=run, stale_claim_s=600)

    def failing_submit(step, checkpoint):
        raise RuntimeError("sbatch: Socket timed out")

    messages = log_lines
    assert submit_pending(settings, failing_submit) == []
    assert "will retry" in messages[0] and not claim_path(settings, 10).exists()

    # A watcher that died right after claiming step 20: its claim blocks others until it is stale.
    now = time.time()
    assert try_claim(settings, 20, now=now - 30)
    calls = tmp_path / "calls.jsonl"
    assert [s for s, _ in submit_pending(settings, recording_submit(calls), now=now)] == [10]
    later = now + 700
    assert [s for s, _ in submit_pending(settings, recording_submit(calls), now=later)] == [20]
    assert len(calls.read_text().splitlines()) == 2
    # A claim with a job id is never stale.
    assert not try_claim(settings, 20, now=later + 10_000)


def test_watch_runs_until_stopped_with_a_last_pass(tmp_path):
    run = tmp_path / "ckpts"
    polls = []

    def should_stop():
        polls.append(len(polls))
        if len(polls) == 2:  # training writes a checkpoint between polls
            make_ckpt(run, 5)
            set_marker(run, 5)
        if len(polls) == 3:
            make_ckpt(run, 10)
            set_marker(run, 10)  # written just before the training job ends
        return len(polls) >= 3

    submitted = watch(ChainSettings(run_dir=run, poll_interval_s=0), recording_submit(tmp_path / "calls.jsonl"),
                      should_stop, sleep=lambda s: None)
    assert [step for step, _ in submitted] == [5, 10]


def test_each_array_task_of_a_checkpoint_list_picks_its_line(tmp_path, monkeypatch):
    from beam_slurm.launch.eval_request import UsageError, build_parser
    from beam_slurm.verbs.evaluate import _checkpoint_from_list

    listed = tmp_path / "checkpoints.txt"
    listed.write_text("/runs/a/global_step_10\n\n/runs/a/global_step_30\n")
    args = build_parser().parse(["--checkpoint-list", str(listed), "--data", "x"]).args
    for task, step in enumerate((10, 30)):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(task))
        assert _checkpoint_from_list(args) == f"/runs/a/global_step_{step}"
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    with pytest.raises(UsageError, match="between 0 and 1"):
        _checkpoint_from_list(args)
