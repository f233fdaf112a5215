"""The one reader and writer of a run's record (`<export_path>/beam_run/run.json`) and its evaluation entries.

Read-modify-write under `run.json.lock` (`beam_slurm.core.shared_lock`: it holds across nodes where flock does not),
then an atomic rename, so readers need no lock; a writer whose lock was taken over while stalled rereads.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from beam_slurm.core import layout
from beam_slurm.core.atomic_files import write_text
from beam_slurm.core.run_record import EvaluationEntry, RecordError, RunRecord, from_json, read_record, to_json
from beam_slurm.core.shared_lock import SharedFileLock

T = TypeVar("T")

LOCK_STALE_AFTER_S = 20.0  # a holder silent this long (dead node, SIGSTOP) loses it
LOCK_TIMEOUT_S = 120.0  # an update takes milliseconds
_UPDATE_TRIES = 3


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def remember_job(job_id: str, export_path: str | os.PathLike[str]) -> None:
    """Index a training job id under this user's state folder, so `RUN` may be the job id (best effort)."""
    with contextlib.suppress(OSError):
        write_text(layout.state_dir() / layout.JOBS_INDEX_DIRNAME / str(job_id), str(export_path) + "\n")


def _parsed(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordError(
            f"{path} cannot be read: {exc}",
            fix="restore it from a backup, or move it aside (the next job writes a new record)",
        ) from exc


class RunStore:
    def __init__(
        self,
        export_path: str | os.PathLike[str],
        *,
        stale_after: float = LOCK_STALE_AFTER_S,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ):
        self.export_path = Path(export_path)
        self.dir = layout.run_dir(self.export_path)
        self.stale_after = stale_after
        self.lock_timeout = lock_timeout

    @property
    def run_file(self) -> Path:
        return self.dir / layout.RUN_FILE

    def exists(self) -> bool:
        return self.run_file.is_file()

    def read(self) -> RunRecord:
        """The record as it stands (an empty one when there is none yet)."""
        return read_record(_parsed(self.run_file), str(self.run_file))

    def update(self, change: Callable[[RunRecord], T]) -> T:
        """Read the record, let `change` edit it in place, write it back, all under the lock; `change`'s result."""
        for _ in range(_UPDATE_TRIES):
            lock = SharedFileLock(self.dir / layout.RUN_LOCK_FILE, stale_after=self.stale_after, poll_interval=0.02)
            lock.acquire(timeout=self.lock_timeout)
            try:
                record = self.read()
                result = change(record)
                if not lock.still_held():
                    continue  # taken over while this writer stalled: what it read may be stale
                self._write(record)
                return result
            finally:
                lock.release()
        raise TimeoutError(f"{self.run_file}: the lock was taken over {_UPDATE_TRIES} times during an update")

    def _write(self, record: RunRecord) -> None:
        write_text(self.run_file, json.dumps(to_json(record), indent=2) + "\n")

    def write_config(self, config_yaml: str) -> None:
        """config.yaml: the resolved recipe of the latest job or submission."""
        write_text(self.dir / layout.CONFIG_FILE, config_yaml)

    def write_commands(self, lines: list[str]) -> None:
        """commands.sh: the latest submission's sbatch commands."""
        write_text(self.dir / layout.COMMANDS_FILE, "\n".join(lines) + "\n")

    def _evaluation_file(self, step: int) -> Path:
        return self.dir / layout.RUN_EVALS_DIRNAME / f"{layout.step_dirname(step)}.json"

    def record_evaluation(self, step: int, checkpoint_dir: str, job_id: str | None, command: str | None) -> Path:
        """evals/global_step_N.json for an evaluation job; one writer per checkpoint (the chain's claim): no lock."""
        path = self._evaluation_file(step)
        earlier = self.evaluation(step)
        entry = EvaluationEntry(
            step=int(step),
            checkpoint=checkpoint_dir,
            job_id=job_id,
            submitted_at=now(),
            command=command,
            earlier_job_ids=[
                *(earlier.earlier_job_ids if earlier else []),
                *([earlier.job_id] if earlier and earlier.job_id else []),
            ],
        )
        write_text(path, json.dumps(to_json(entry), indent=2) + "\n")
        return path

    def evaluation(self, step: int) -> EvaluationEntry | None:
        return _evaluation_entry(self._evaluation_file(step))

    def evaluations(self) -> list[EvaluationEntry]:
        """Recorded evaluation jobs, by step (unreadable entries are skipped)."""
        folder = self.dir / layout.RUN_EVALS_DIRNAME
        entries = [_evaluation_entry(p) for p in folder.glob("global_step_*.json")] if folder.is_dir() else []
        return sorted((e for e in entries if e is not None), key=lambda e: e.step)


def _evaluation_entry(path: Path) -> EvaluationEntry | None:
    """The entry in `path`; None when there is none or it cannot be read."""
    try:
        return from_json(EvaluationEntry, _parsed(path), str(path)) if path.is_file() else None
    except RecordError:
        return None
