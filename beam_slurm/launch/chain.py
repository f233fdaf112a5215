"""Chained evaluation: exactly one evaluation job per complete checkpoint of a run.

A watcher polls the run's export folder and claims each new complete ``global_step_N`` with a claim file created by
``open(O_CREAT | O_EXCL)`` on shared storage, which succeeds for exactly one caller across processes and nodes, then
submits through its ``submit(step, folder)``: racing watchers, a watcher restarted by a requeue and a one-shot pass
never submit twice. Complete: up to SkyRL's marker step, or (an HF export, written in place without a marker) a whole
model no file of which changed for ``settle_s`` seconds. A failed submission releases its claim so the next poll
retries; a claim whose owner died before submitting is taken over by an atomic rename, which only one watcher can win.
The watcher never touches the training job."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from beam_slurm.core.atomic_files import write_text
from beam_slurm.core.layout import STEP_DIR, latest_checkpoint_step
from beam_slurm.jobs.evaluation.checkpoints import CheckpointError, check_model_dir, model_dir

logger = logging.getLogger(__name__)
CLAIMS_DIRNAME = ".eval_claims"

Submit = Callable[[int, Path], str]  # submit(step, checkpoint folder) -> job id


@dataclass
class ChainSettings:
    """Which run to watch and how its evaluations are submitted."""

    run_dir: Path  # Folder holding global_step_N: SkyRL's ckpt_path (with its marker file) or export_path (HF exports)
    claims_dir: Path | None = None  # Where claim files live (shared storage); None = <run_dir>/.eval_claims
    settle_s: float = 60.0  # An HF export counts as complete once none of its files changed for this long
    stale_claim_s: float = 600.0  # a claim older than this without a job id is a dead watcher's
    poll_interval_s: float = 30.0  # Seconds between two looks at run_dir in watch()

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        self.claims_dir = self.run_dir / CLAIMS_DIRNAME if self.claims_dir is None else Path(self.claims_dir)


def complete_checkpoints(settings: ChainSettings, now: float | None = None) -> list[tuple[int, Path]]:
    """(step, checkpoint dir) of every complete checkpoint in run_dir, by step."""
    run_dir = settings.run_dir
    if not run_dir.is_dir():
        return []
    steps = sorted(
        (int(match.group(1)), path)
        for path in run_dir.iterdir()
        if path.is_dir() and (match := STEP_DIR.match(path.name))
    )
    latest = latest_checkpoint_step(run_dir)
    if latest is not None:
        return [(step, path) for step, path in steps if step <= latest]
    now = time.time() if now is None else now
    complete = []
    for step, path in steps:
        folder = model_dir(path)
        try:
            check_model_dir(folder, "export")
        except CheckpointError:
            continue
        newest = max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=folder.stat().st_mtime)
        if now - newest >= settings.settle_s:
            complete.append((step, path))
    return complete


def claim_path(settings: ChainSettings, step: int) -> Path:
    """The claim file of one step."""
    assert settings.claims_dir is not None  # __post_init__ sets it
    return settings.claims_dir / f"global_step_{step}.json"


def try_claim(settings: ChainSettings, step: int, now: float | None = None) -> bool:
    """Claim step for this process; False when another process holds it (or already submitted it)."""
    path = claim_path(settings, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    now = time.time() if now is None else now
    owner = {"host": socket.gethostname(), "pid": os.getpid(), "claimed_at": now, "job_id": None}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _take_over_stale(path, settings.stale_claim_s, now):
                return False
            continue  # the stale claim is gone: race for a fresh one (O_EXCL decides)
        with os.fdopen(fd, "w") as handle:
            json.dump(owner, handle)
        return True
    return False


def _take_over_stale(path: Path, stale_claim_s: float, now: float) -> bool:
    """Remove a claim whose owner died before submitting; True if this process removed it."""
    try:
        claim = json.loads(path.read_text() or "{}")
        age = now - float(claim.get("claimed_at", path.stat().st_mtime))
    except (OSError, ValueError):
        # Unreadable: possibly being written this instant; judge by the file's age.
        try:
            claim, age = {}, now - path.stat().st_mtime
        except OSError:
            return False
    if claim.get("job_id") or age < stale_claim_s:
        return False
    try:
        # Only one watcher's rename of the same file succeeds; the others get FileNotFoundError.
        os.rename(path, path.with_name(f".{path.name}.stale-{uuid.uuid4().hex}"))
    except FileNotFoundError:
        return False
    return True


def submit_pending(settings: ChainSettings, submit: Submit, now: float | None = None) -> list[tuple[int, str]]:
    """Claim and submit every complete, unclaimed checkpoint; returns (step, job_id) of what this call submitted."""
    submitted = []
    for step, path in complete_checkpoints(settings, now):
        if (
            claim_path(settings, step).exists()
            and not _is_stale(settings, step, now)
            or not try_claim(settings, step, now)
        ):
            continue
        try:
            job_id = str(submit(step, path))
        except Exception as exc:
            # Give the step back so the next poll retries it: a failed submission must not skip a checkpoint.
            claim_path(settings, step).unlink(missing_ok=True)
            logger.info(f"eval-chain: submitting the evaluation of global_step_{step} failed ({exc}); will retry")
            continue
        claim = json.loads(claim_path(settings, step).read_text())
        # Rewriting the claim to add the job id: temp + rename keeps it whole for readers.
        write_text(
            claim_path(settings, step),
            json.dumps({**claim, "job_id": job_id, "checkpoint": str(path), "submitted_at": time.time()}),
        )
        logger.info(f"eval-chain: global_step_{step} -> evaluation job {job_id}")
        submitted.append((step, job_id))
    return submitted


def _is_stale(settings: ChainSettings, step: int, now: float | None) -> bool:
    try:
        claim = json.loads(claim_path(settings, step).read_text() or "{}")
    except (OSError, ValueError):
        return False
    now = time.time() if now is None else now
    return not claim.get("job_id") and now - float(claim.get("claimed_at", now)) >= settings.stale_claim_s


def watch(
    settings: ChainSettings,
    submit: Submit,
    should_stop: Callable[[], bool],
    sleep: Callable[[float], object] = time.sleep,
) -> list[tuple[int, str]]:
    """Submit evaluations as checkpoints complete until should_stop() is true, then make one last pass."""
    submitted: list[tuple[int, str]] = []
    while True:
        stopping = should_stop()
        submitted += submit_pending(settings, submit)
        if stopping:
            return submitted
        sleep(settings.poll_interval_s)
