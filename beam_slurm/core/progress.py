"""Progress heartbeats: the trainer says where it is (step, phase, since when), the job's hang watchdog reads it.

The trainer's callbacks fire in a Ray task that may sit on any node, so the heartbeat is a file on the storage both
sides share, ``<ckpt_path>/.beam/progress.json``, replaced atomically at each phase change.

Phases: ``load``, ``step`` (a step's start to its end), ``saving`` (a step's end to ``on_save``, or to the next
step's start), ``after-save`` (the HF export, the log), ``eval``, ``after-eval``, ``finished``; ``step_seconds`` are
the last whole steps' durations. Every phase change is also appended to ``<ckpt_path>/.beam/progress_events.jsonl``
(``{"t", "phase", "step", "attempt"}``), by which the goodput ledger (:mod:`beam_slurm.policy.goodput`) splits
each attempt's node-seconds. Standard library only (the job runs Python 3.11, the training container 3.12).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beam_slurm.core.atomic_files import write_json
from beam_slurm.core.layout import IN_JOB_ATTEMPT_ENV, attempt_label

PROGRESS_FILE = "progress.json"
EVENTS_FILE = "progress_events.jsonl"
PHASES = ("load", "step", "saving", "after-save", "eval", "after-eval", "finished")
KEPT_STEP_TIMES = 32
"""Step durations the heartbeat keeps (the watchdog takes their median)."""


def progress_path(ckpt_path: str | os.PathLike[str]) -> Path:
    return Path(ckpt_path) / ".beam" / PROGRESS_FILE


def read_events(ckpt_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every phase change the trainer appended, oldest first; a torn last line is skipped."""
    try:
        lines = (Path(ckpt_path) / ".beam" / EVENTS_FILE).read_text().splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


@dataclass(frozen=True)
class Progress:
    """One heartbeat as the watchdog reads it."""

    step: int
    phase: str
    since: float
    """When this phase began (epoch seconds)."""
    attempt: int
    host: str
    step_seconds: tuple[float, ...] = ()

    @property
    def median_step_s(self) -> float | None:
        return statistics.median(self.step_seconds) if self.step_seconds else None


def read_progress(ckpt_path: str | os.PathLike[str]) -> Progress | None:
    """The newest heartbeat, or None when there is none or it cannot be read (the next poll reads it again)."""
    try:
        data = json.loads(progress_path(ckpt_path).read_text())
        return Progress(
            step=int(data["step"]),
            phase=str(data["phase"]),
            since=float(data["since"]),
            attempt=int(data.get("attempt", 0)),
            host=str(data.get("host", "")),
            step_seconds=tuple(float(s) for s in data.get("step_seconds", ())),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class ProgressRecorder:
    """Writes the heartbeat at each phase change of the training loop (the SkyRL callback and the rehearsal)."""

    ckpt_path: str
    attempt: int = field(default_factory=lambda: int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0))
    step_seconds: list[float] = field(default_factory=list)
    _step_started: float | None = None
    _step: int = 0

    def _write(self, phase: str, step: int) -> None:
        self._step = step
        now = time.time()
        try:
            write_json(
                progress_path(self.ckpt_path),
                {
                    "step": step,
                    "phase": phase,
                    "since": now,
                    "attempt": self.attempt,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "step_seconds": self.step_seconds,
                },
            )
            with open(progress_path(self.ckpt_path).with_name(EVENTS_FILE), "a") as events:
                events.write(
                    json.dumps({"t": round(now, 3), "phase": phase, "step": step, "attempt": self.label}) + "\n"
                )
        except OSError as exc:  # a heartbeat is never worth a training run; the watchdog sees the silence
            print(f"[beam progress] could not write {progress_path(self.ckpt_path)}: {exc}", flush=True)

    @property
    def label(self) -> str:
        return attempt_label(self.attempt, os.environ.get(IN_JOB_ATTEMPT_ENV) or 0)

    def loading(self, step: int = 0) -> None:
        self._write("load", step)

    def step_start(self, step: int) -> None:
        now = time.time()
        if self._step_started is not None:
            self.step_seconds = (self.step_seconds + [round(now - self._step_started, 3)])[-KEPT_STEP_TIMES:]
        self._step_started = now
        self._write("step", step)

    def step_end(self, step: int) -> None:
        self._write("saving", step)

    def saved(self, step: int) -> None:
        self._write("after-save", step)

    def eval_start(self, step: int | None = None) -> None:
        self._write("eval", self._step if step is None else step)

    def eval_end(self, step: int | None = None) -> None:
        self._write("after-eval", self._step if step is None else step)

    def finished(self, step: int) -> None:
        self._write("finished", step)
