"""One evaluation task (a checkpoint on one dataset, for one or several k), resumable at every chunk: killed at any
point, it keeps every chunk it finished; run again, it generates and grades only what is missing.

Layout in an evaluation folder (``<export_path>/beam_evals/global_step_N/``, or ``--out``):

    samples/<dataset>-<sampling id>/   responses-<chunk>.jsonl per finished chunk, grades-<chunk>.jsonl once graded,
                                       each published by rename. The sampling id leaves k out: a larger k adds
                                       responses to the same store, a smaller k reads the first k.
    tasks/<dataset>-k<k>-<task id>/    one task key's results; ``metrics.json`` there marks it finished.
    metrics.json, grades.jsonl, ...    the view `report` and `status` read: per dataset, the finished task with the
                                       largest k."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beam_slurm.core.atomic_files import write_text
from beam_slurm.core.shared_lock import SharedFileLock
from beam_slurm.jobs.evaluation.grading_pool import GradingPool, grade_with_pool
from beam_slurm.jobs.evaluation.metrics import compute_metrics
from beam_slurm.jobs.evaluation.problems import Problem
from beam_slurm.jobs.evaluation.results import GRADES_FILE, INFO_FILE, METRICS_FILE, write_results

logger = logging.getLogger(__name__)
SAMPLES_DIRNAME = "samples"
TASKS_DIRNAME = "tasks"
VIEW_LOCK = ".view.shared-lock"  # new names: the flock era left empty .view.lock, .store.lock files
STORE_LOCK = ".store.shared-lock"
# Array tasks on other nodes share these locks, so flock (node-local on Lustre `localflock`, BeeGFS) will not do.
# A holder may keep STORE_LOCK for a whole generation: its heartbeat keeps the lock fresh; a killed holder's lock
# is taken over after a minute of no heartbeat.
LOCK_STALE_AFTER_S = 60.0
LOCK_HEARTBEAT_S = 10.0


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def sampling_identity(model: dict | None, server: dict | None, data_sha256: str, sampling) -> dict[str, Any]:
    """What makes two sets of samples interchangeable (k excluded: samples are drawn independently)."""
    return {
        "model": model,
        "server": server,
        "data_sha256": data_sha256,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "reasoning_effort": sampling.reasoning_effort,
    }


@dataclass(frozen=True)
class TaskKey:
    """Checkpoint, dataset, k and every sampling setting: equal keys give the same results."""

    dataset: str
    k: int
    identity: dict = field(hash=False)  # sampling_identity(...) of the checkpoint and dataset
    limit: int | None = None  # eval.limit: it changes the metrics

    @property
    def sampling_id(self) -> str:
        return _digest(self.identity)

    @property
    def samples_dir(self) -> str:
        return f"{SAMPLES_DIRNAME}/{self.dataset}-{self.sampling_id}"

    @property
    def task_dir(self) -> str:
        return f"{TASKS_DIRNAME}/{self.dataset}-k{self.k}-{_digest([self.identity, self.limit])}"


def task_finished(out_dir: Path, key: TaskKey) -> bool:
    return (out_dir / key.task_dir / "metrics.json").is_file()


@contextlib.contextmanager
def locked(path: Path, stale_after: float = LOCK_STALE_AFTER_S) -> Iterator[SharedFileLock]:
    """Hold the shared-storage lock at `path` (seen by every node) for the block; waits as long as a live holder."""
    heartbeat = min(LOCK_HEARTBEAT_S, stale_after / 6)
    with SharedFileLock(
        path, stale_after=stale_after, heartbeat=heartbeat, poll_interval=0.05, log=logger.info
    ) as lock:
        yield lock


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    # Rows end with "\n" only: str.splitlines also splits at chars JSON leaves raw in responses (U+2028, U+0085, ...).
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


class SampleStore:
    """The saved responses (and their grades) of one checkpoint, dataset and sampling setting."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def response_chunks(self) -> list[Path]:
        # Only published names: temporaries are hidden (.responses-*.tmp) and never match.
        return sorted(self.folder.glob("responses-*.jsonl")) if self.folder.is_dir() else []

    @staticmethod
    def grades_of(chunk: Path) -> Path:
        return chunk.with_name("grades-" + chunk.name.removeprefix("responses-"))

    def responses(self) -> list[dict[str, Any]]:
        return [row for chunk in self.response_chunks() for row in _read_jsonl(chunk)]

    def counts(self) -> dict[str, int]:
        """problem id -> responses saved."""
        return dict(collections.Counter(str(row["problem_id"]) for row in self.responses()))

    def add_chunk(self, rows: list[dict[str, Any]]) -> Path:
        """Publish one finished chunk of responses (atomically)."""
        path = self.folder / f"responses-{time.time_ns():x}-{uuid.uuid4().hex[:6]}.jsonl"
        write_text(path, _jsonl(rows))
        return path

    def ungraded(self) -> list[Path]:
        return [chunk for chunk in self.response_chunks() if not self.grades_of(chunk).is_file()]

    def grades(self) -> list[dict[str, Any]]:
        """Every graded response (chunks not graded yet are left out)."""
        return [
            row
            for chunk in self.response_chunks()
            if self.grades_of(chunk).is_file()
            for row in _read_jsonl(self.grades_of(chunk))
        ]


@dataclass
class Progress:
    """What one run of a task did (the benchmark and the tests read it from the task's info.json)."""

    reused: int = 0  # responses saved by an earlier attempt or k
    generated: int = 0
    chunks_graded: int = 0
    generation_s: float = 0.0
    grading_s: float = 0.0


def generate_missing(
    store: SampleStore,
    problems: list[Problem],
    k: int,
    engine_factory: Callable[[], Any],
    chunk_problems: int,
    progress: Progress,
    chunk_saved: Callable[[], None] = lambda: None,
) -> None:
    """Generate what k responses per problem lack, one saved chunk at a time; `chunk_saved` after each (heartbeat)."""
    counts = store.counts()
    progress.reused += sum(min(counts.get(p.problem_id, 0), k) for p in problems)
    # (problem, responses still needed, index of the first) for every problem with fewer than k saved
    todo = [
        (p, k - counts.get(p.problem_id, 0), counts.get(p.problem_id, 0))
        for p in problems
        if counts.get(p.problem_id, 0) < k
    ]
    if not todo:
        return
    started = time.monotonic()
    engine = engine_factory()
    logger.info(
        f"evaluate: {sum(n for _, n, _ in todo)} responses to generate for {len(todo)} problems "
        f"({progress.reused} reused), {chunk_problems} problems per chunk"
    )
    try:
        for first in range(0, len(todo), chunk_problems):
            rows = engine.generate(todo[first : first + chunk_problems])
            store.add_chunk(rows)
            progress.generated += len(rows)
            chunk_saved()
            logger.info(
                f"evaluate: saved chunk {first // chunk_problems + 1}/{-(-len(todo) // chunk_problems)} "
                f"({len(rows)} responses)"
            )
    finally:
        progress.generation_s += time.monotonic() - started


def grade_missing(store: SampleStore, limits, progress: Progress) -> None:
    """Grade every saved chunk that has no grades yet (one worker pool for all of them), each published as it ends."""
    pending = store.ungraded()
    if not pending:
        return
    started = time.monotonic()
    with GradingPool(limits) as pool:
        for chunk in pending:
            write_text(store.grades_of(chunk), _jsonl(grade_with_pool(pool, _read_jsonl(chunk))))
            progress.chunks_graded += 1
    progress.grading_s += time.monotonic() - started
    logger.info(f"evaluate: graded {len(pending)} chunk(s) in {time.monotonic() - started:.1f} s")


def first_k(grades: list[dict[str, Any]], problems: list[Problem], k: int) -> list[dict[str, Any]]:
    """The graded responses 0..k-1 of each problem, in problem then sample order."""
    wanted = {p.problem_id: index for index, p in enumerate(problems)}
    rows = [g for g in grades if str(g["problem_id"]) in wanted and g["sample"] < k]
    return sorted(rows, key=lambda g: (wanted[str(g["problem_id"])], g["sample"]))


def write_task_results(out_dir: Path, key: TaskKey, grades: list[dict[str, Any]], record: dict[str, Any]) -> dict:
    """Metrics of one task key, written to its folder (metrics.json last); returns the metrics."""
    metrics = compute_metrics(grades)
    for entry in metrics.values():
        entry["dataset"] = key.dataset
    write_results(
        out_dir / key.task_dir,
        grades,
        metrics,
        extra={
            **record,
            "task_key": {"dataset": key.dataset, "k": key.k, "limit": key.limit, "sampling": key.identity},
        },
    )
    return metrics


def refresh_view(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Rewrite the folder's view (per dataset the finished task with the largest k) under a lock, for racing tasks."""
    tasks = out_dir / TASKS_DIRNAME
    with locked(out_dir / VIEW_LOCK):
        chosen: dict[str, tuple[int, float, Path]] = {}
        for folder in sorted(tasks.iterdir()) if tasks.is_dir() else []:
            metrics_file = folder / METRICS_FILE
            if not metrics_file.is_file():
                continue
            info = json.loads((folder / INFO_FILE).read_text())
            dataset, k = info["task_key"]["dataset"], int(info["task_key"]["k"])
            rank = (k, metrics_file.stat().st_mtime, folder)
            if dataset not in chosen or rank[:2] > chosen[dataset][:2]:
                chosen[dataset] = rank
        if not chosen:
            return {}
        grades, metrics, infos = [], {}, {}  # of every dataset's chosen task
        for dataset in sorted(chosen):
            folder = chosen[dataset][2]
            grades += _read_jsonl(folder / GRADES_FILE)
            metrics.update(json.loads((folder / METRICS_FILE).read_text()))
            infos[dataset] = {**json.loads((folder / INFO_FILE).read_text()), "folder": str(folder)}
        write_results(out_dir, grades, metrics, extra={**infos[sorted(infos)[0]], "datasets": infos})
        return metrics
