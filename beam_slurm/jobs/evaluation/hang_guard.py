"""The hang watchdog of an evaluation task: generation that stops producing chunks ends the task, its chunks kept.

An engine that stops producing tokens leaves the task alive and the array waiting until its time limit. A saved chunk
(`resumable.generate_missing`) is the unit of progress: a thread of the task's process checks that one is saved within
`chunk_limit_s`. On a hang it dumps the stacks of this process (faulthandler) and its children (py-spy: vLLM's engine)
into `<store>/hang/<job>-<attempt>/`, then requeues the task (`scontrol requeue`: Slurm ends every process of it; the
next attempt generates only what the saved chunks lack), at most eval.launcher.max_num_timeout times, then ends it as
failed."""

from __future__ import annotations

import faulthandler
import logging
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from beam_slurm.core.atomic_files import write_text
from beam_slurm.jobs.ray_cluster.hang_dump import dump_process, parent_pid, py_spy, role_of
from beam_slurm.policy.hang_watch import DERIVED_FLOOR_S, DERIVED_MULTIPLE
from beam_slurm.slurm import scheduler

logger = logging.getLogger(__name__)
POLL_S = 2.0


def chunk_limit_s(timeout_s: float | None, chunk_seconds: list[float], start_allowance_s: float) -> float:
    """Seconds the current chunk may take (`start_allowance_s` added before the first chunk is saved)."""
    derived = max(DERIVED_FLOOR_S, DERIVED_MULTIPLE * statistics.median(chunk_seconds)) if chunk_seconds else None
    base = float(timeout_s) if timeout_s else derived or DERIVED_FLOOR_S
    return base if chunk_seconds else base + start_allowance_s


def describe(timeout_s: float | None, start_allowance_s: float) -> str:
    """`plan`'s row for evaluation tasks."""
    if timeout_s == 0:
        return "off (eval.hang_timeout_s=0)"
    head = (
        f"{timeout_s:.0f} s a chunk (eval.hang_timeout_s)"
        if timeout_s
        else f"{DERIVED_MULTIPLE:g} x the median chunk time, at least {DERIVED_FLOOR_S:.0f} s "
        "(eval.hang_timeout_s unset)"
    )
    return f"{head}; +{start_allowance_s:.0f} s before the first chunk (engine start and model load)"


def child_pids(pid: int) -> list[int]:
    """Every descendant of `pid` (procfs: each process's parent)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parents.setdefault(parent_pid(int(entry)), []).append(int(entry))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo += parents.get(child, [])
    return sorted(found)


def requeue_this_task(max_requeues: int) -> None:
    """`scontrol requeue` of this array task, unless requeued max_requeues times already: then it exits 1 (fails)."""
    job = os.environ.get("SLURM_JOB_ID")
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    if job and restarts < max_requeues:
        logger.info(
            f"evaluate: requeueing task {job} (attempt {restarts + 1} of at most {max_requeues + 1}); its saved "
            "chunks are kept"
        )
        try:
            scheduler.requeue(job)
            time.sleep(120)  # Slurm ends this process as it requeues the job
        except scheduler.SlurmCommandError as exc:
            logger.info(f"evaluate: requeue failed: {exc}")
    else:
        logger.info(f"evaluate: not requeueing ({restarts} requeues, eval.launcher.max_num_timeout={max_requeues})")
    os._exit(1)


class GenerationWatchdog:
    """Hung if no chunk is saved (`chunk_saved`) in `chunk_limit_s`; `on_hang` (default requeue) runs after dumps."""

    def __init__(self, timeout_s: float | None, start_allowance_s: float, folder: Path, on_hang: Callable[[], None]):
        self.timeout_s, self.start_allowance_s, self.folder = timeout_s, start_allowance_s, folder
        self.on_hang = on_hang
        self.chunk_seconds: list[float] = []
        self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="eval-hang-watchdog", daemon=True)

    def __enter__(self) -> GenerationWatchdog:
        if self.timeout_s != 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()

    def chunk_saved(self) -> None:
        now = time.monotonic()
        self.chunk_seconds.append(now - self.last)
        self.last = now

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            limit = chunk_limit_s(self.timeout_s, self.chunk_seconds, self.start_allowance_s)
            silent = time.monotonic() - self.last
            if silent > limit:
                logger.info(
                    f"evaluate: hang: no chunk saved for {silent:.0f} s (limit {limit:.0f} s, "
                    f"{len(self.chunk_seconds)} chunks saved by this attempt); stacks in {self.dump()}"
                )
                self.on_hang()
                return

    def dump(self) -> Path:
        """This process's threads (faulthandler) and its children's stacks (py-spy --nonblocking)."""
        attempt = f"{os.environ.get('SLURM_JOB_ID', 'local')}-{os.environ.get('SLURM_RESTART_COUNT', '0')}"
        folder = self.folder / "hang" / attempt
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{os.getpid()}-task.txt", "w") as handle:
            faulthandler.dump_traceback(file=handle, all_threads=True)
        spy = py_spy()
        for pid in child_pids(os.getpid()):
            text, error = dump_process(pid, spy)
            write_text(
                folder / f"{pid}-{role_of(pid).replace('/', '_').replace(' ', '_')[:60]}.txt",
                text or f"# no stack: {error}\n",
            )
        return folder
