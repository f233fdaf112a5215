"""Grading in worker processes, every item bounded in time and memory.

math-verify (sympy) can run for minutes or exhaust memory on a tower of exponents, and its own ``signal.alarm`` works
only on a main thread. Each worker caps its address space (a runaway item raises MemoryError), arms a per-item alarm on
its own main thread and publishes in shared memory which item it is on, so the parent SIGKILLs it when a C-level
computation ignores the alarm; the rest of its batch goes to a fresh worker. An item that hits a bound is graded wrong
(``math_verify`` null, counted as a timeout). Workers come from a ``forkserver`` that imported math-verify once: a
replacement starts in milliseconds and the pool is safe in a process that runs threads (Ray, vLLM). A script that grades
at import time must do so under ``if __name__ == "__main__":``."""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from beam_slurm.jobs.evaluation import grading
from beam_slurm.jobs.evaluation.metrics import GradingInputError, validate_rows

if TYPE_CHECKING:  # the workers' forkserver preloads this module: no Hydra there
    from beam_slurm.config.schema import GradeConfig

PRIMARY = "primary"
MATH_VERIFY = "math_verify"

# Items per message to a worker. Primary items cost ~20 us, so large batches amortise the pipe; math-verify
# items cost ~1 ms and a killed worker's batch is redone, so those batches stay small.
_BATCH_SIZE = {PRIMARY: 2048, MATH_VERIFY: 32}
_POLL_S = 0.05


class GradingSetupError(RuntimeError):
    """The grading environment is incomplete (math-verify missing); the message says what to install."""


@dataclass(frozen=True)
class GradingLimits:
    """Bounds on every grading call."""

    timeout_s: float  # grade.timeout_s
    memory_mb: int  # grade.memory_mb
    workers: int  # grade.workers; 0 = the CPUs this process may use
    kill_grace_s: float = 1.0
    """Seconds after ``timeout_s`` before the parent kills a worker that ignored its alarm (not a setting)."""

    @classmethod
    def from_settings(cls, grade: GradeConfig) -> GradingLimits:
        return cls(timeout_s=grade.timeout_s, memory_mb=grade.memory_mb, workers=grade.workers)

    def __post_init__(self) -> None:
        for wrong, message in (
            (not self.timeout_s > 0, f"grading timeout must be > 0 seconds, got {self.timeout_s}"),
            (self.kill_grace_s < 0, f"grading kill grace must be >= 0 seconds, got {self.kill_grace_s}"),
            (
                self.memory_mb < 256,
                f"grading memory cap must be >= 256 MiB (math-verify imports sympy), got {self.memory_mb}",
            ),
            (self.workers < 0, f"grading workers must be >= 0 (0 = all usable CPUs), got {self.workers}"),
        ):
            if wrong:
                raise GradingInputError(message)

    @property
    def worker_count(self) -> int:
        return self.workers or len(os.sched_getaffinity(0))

    @property
    def item_bound_s(self) -> float:
        """Longest wall time one item can take before it is given up on (alarm, kill grace, polling slack)."""
        return self.timeout_s + self.kill_grace_s + 2 * _POLL_S


@dataclass
class PhaseStats:
    """What one pass over the items (primary rule or math-verify) cost."""

    items: int = 0
    wall_s: float = 0.0  # pool start excluded
    worst_item_s: float = 0.0  # measured in the worker, or by the parent up to the kill
    timeouts: int = 0  # items that hit the time or memory bound
    killed_workers: int = 0  # killed (hard timeout) or found dead, each replaced

    @property
    def per_second(self) -> float:
        return self.items / self.wall_s if self.wall_s > 0 else float("inf")


@dataclass
class GradingOutcome:
    """Graded rows and the cost of grading them."""

    grades: list[dict[str, Any]]  # input rows plus "correct", "pred" and "math_verify", in input order
    phases: dict[str, PhaseStats] = field(default_factory=dict)  # "primary" and "math_verify"
    pool_start_s: float = 0.0

    @property
    def timeouts(self) -> int:
        """Rows whose grading hit a bound (``math_verify`` is null)."""
        return sum(1 for g in self.grades if g["math_verify"] is None)


class _ItemTimeout(BaseException):
    """BaseException so that library code catching Exception cannot swallow the alarm."""


def _on_alarm(signum, frame):
    raise _ItemTimeout()


def _grade_primary_item(tail: str, ground_truth: str):
    verdict = grading.grade_primary(tail, ground_truth)
    return (verdict.correct, verdict.pred)


def _grade_math_verify_item(tail: str, ground_truth: str):
    try:
        return grading.math_verify_item(tail, ground_truth)
    except (_ItemTimeout, MemoryError):
        raise
    except Exception:
        # math-verify's own policy: an item it cannot parse or compare is not equivalent.
        return False


_ITEM_FUNCTIONS = {PRIMARY: _grade_primary_item, MATH_VERIFY: _grade_math_verify_item}


def _worker_main(conn, progress, memory_mb: int, timeout_s: float) -> None:
    """Grade each (kind, items) message under the alarm; send back (values, worst seconds), None for a bounded item.
    ``progress``, shared with the parent: [index of the current item, its start time, 0 when idle]."""
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    grading.quiet_math_verify_logging()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business; it kills us
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        kind, items = message
        grade_item = _ITEM_FUNCTIONS[kind]
        values, worst = [], 0.0
        for index, (tail, ground_truth) in enumerate(items):
            progress[1] = 0.0
            progress[0] = index
            progress[1] = start = time.monotonic()
            try:
                signal.setitimer(signal.ITIMER_REAL, timeout_s)
                try:
                    value = grade_item(tail, ground_truth)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except (_ItemTimeout, MemoryError):
                value = None
            worst = max(worst, time.monotonic() - start)
            values.append(value)
        progress[1] = 0.0
        conn.send((values, worst))


@dataclass
class _Task:
    kind: str
    offset: int  # index of the task's first item in the pass's item list
    items: list[tuple[str, str]]


class _Worker:
    def __init__(self, context, limits: GradingLimits):
        self.progress = context.RawArray("d", 2)
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(
            target=_worker_main,
            args=(child_conn, self.progress, limits.memory_mb, limits.timeout_s),
            daemon=True,
            name="beam-grading-worker",
        )
        self.process.start()
        child_conn.close()
        self.task: _Task | None = None

    def current_item(self) -> tuple[int, float] | None:
        """(index, start) of the item being graded, or None when idle or between items."""
        first_start = self.progress[1]
        index = int(self.progress[0])
        return None if first_start == 0.0 or self.progress[1] != first_start else (index, first_start)

    def kill(self) -> None:
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):  # a dead worker's pipe is broken
            self.conn.send(None)
        self.process.join(timeout=2)
        self.kill()  # a SIGKILL only if it is still there; closes the pipe either way


class GradingPool:
    """A fixed number of grading workers (a context manager); one that overruns its bound is killed and replaced."""

    def __init__(self, limits: GradingLimits):
        if importlib.util.find_spec("math_verify") is None:
            raise GradingSetupError(
                "math-verify is not installed in this environment; install the eval extra "
                "(pip install 'beam-slurm[eval]') or the dev extra"
            )
        self.limits = limits
        self._context = multiprocessing.get_context("forkserver")
        # Honoured only when this process starts its first forkserver; later calls are harmless.
        self._context.set_forkserver_preload(["beam_slurm.jobs.evaluation.grading_pool", "math_verify", "sympy"])
        self._workers = [_Worker(self._context, limits) for _ in range(limits.worker_count)]

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker (kill those that do not stop within 2 s)."""
        for worker in self._workers:
            worker.stop()
        self._workers = []

    def run(self, kind: str, items: list[tuple[str, str]]) -> tuple[list[Any], PhaseStats]:
        """Grade (tail, ground_truth) items; a value of None marks an item that hit its bound."""
        stats = PhaseStats(items=len(items))
        started = time.monotonic()
        results: list[Any] = [None] * len(items)
        size = _BATCH_SIZE[kind]
        pending = collections.deque(
            _Task(kind, start, items[start : start + size]) for start in range(0, len(items), size)
        )
        hard_limit = self.limits.timeout_s + self.limits.kill_grace_s
        while pending or any(w.task is not None for w in self._workers):
            for worker in self._workers:
                if worker.task is None and pending:
                    worker.task = pending.popleft()
                    worker.conn.send((worker.task.kind, worker.task.items))
            busy = {w.conn: w for w in self._workers if w.task is not None}
            for conn in multiprocessing.connection.wait(list(busy), timeout=_POLL_S):
                worker = busy[conn]
                assert worker.task is not None  # busy holds only the workers with a task
                try:
                    values, worst = worker.conn.recv()  # conn itself; wait() types it as any waitable
                except (EOFError, OSError):
                    continue  # died: handled below as a dead worker
                results[worker.task.offset : worker.task.offset + len(values)] = values
                stats.timeouts += sum(1 for v in values if v is None)
                stats.worst_item_s = max(stats.worst_item_s, worst)
                worker.task = None
            now = time.monotonic()
            for slot, worker in enumerate(self._workers):
                if worker.task is None:
                    continue
                current = worker.current_item()
                dead = not worker.process.is_alive()
                if not dead and (current is None or now - current[1] <= hard_limit):
                    continue
                # Over the hard bound, or crashed (e.g. killed by the kernel): give up on the current item only.
                task = worker.task
                index, elapsed = (current[0], now - current[1]) if current is not None else (0, 0.0)
                worker.kill()
                stats.killed_workers += 1
                stats.timeouts += 1
                stats.worst_item_s = max(stats.worst_item_s, elapsed)  # its result stays None
                if index + 1 < len(task.items):
                    pending.appendleft(_Task(kind, task.offset + index + 1, task.items[index + 1 :]))
                if index > 0:
                    pending.appendleft(_Task(kind, task.offset, task.items[:index]))
                self._workers[slot] = _Worker(self._context, self.limits)
        stats.wall_s = time.monotonic() - started
        return results, stats


def grade_rows_detailed(rows: Iterable[dict[str, Any]], limits: GradingLimits) -> GradingOutcome:
    """Grade rows with the primary rule and math-verify, each item bounded; also report what it cost."""
    rows = list(rows)
    validate_rows(rows)
    outcome = GradingOutcome(grades=[])
    pool_started = time.monotonic()
    with GradingPool(limits) as pool:
        outcome.pool_start_s = time.monotonic() - pool_started
        grade_with_pool(pool, rows, outcome)
    return outcome


def grade_with_pool(
    pool: GradingPool, rows: list[dict[str, Any]], outcome: GradingOutcome | None = None
) -> list[dict[str, Any]]:
    """Grade validated `rows` in an open pool; returns the graded rows, also appended to `outcome.grades`."""
    outcome = outcome if outcome is not None else GradingOutcome(grades=[])
    first = len(outcome.grades)
    gts = [str(row["ground_truth"]) for row in rows]
    primary_items = [(row["response"][-grading.PRIMARY_TAIL_CHARS :], gt) for row, gt in zip(rows, gts, strict=False)]
    primary, outcome.phases[PRIMARY] = pool.run(PRIMARY, primary_items)
    del primary_items
    mv_items = [(row["response"][-grading.MATH_VERIFY_TAIL_CHARS :], gt) for row, gt in zip(rows, gts, strict=False)]
    verified, outcome.phases[MATH_VERIFY] = pool.run(MATH_VERIFY, mv_items)
    for row, primary_value, mv_value in zip(rows, primary, verified, strict=False):
        # None: the rule itself overran its bound: wrong, and counted through the null second opinion.
        correct, pred = (False, None) if primary_value is None else primary_value
        outcome.grades.append(
            {**row, "correct": correct, "pred": pred, "math_verify": None if primary_value is None else mv_value}
        )
    return outcome.grades[first:]
