"""Where a run's GPU-hours went: every allocated node-second of every attempt in exactly one phase.

The phases (the JSON's names), their sources and the units: docs, guides/operations.md, "The goodput ledger". Allocated
node-seconds are ElapsedRaw x NNodes over every record `sacct -D -X` gives (requeued instances, the part of a job
before Slurm resized it). Standard library only.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NotRequired, TypedDict, TypeVar, cast

from beam_slurm.core.atomic_files import read_json
from beam_slurm.core.progress import read_events
from beam_slurm.core.ray_records import read_failure
from beam_slurm.core.run_record import Attempt, RunRecord
from beam_slurm.core.run_store import RunStore
from beam_slurm.policy.notice_budget import STOP_FILE
from beam_slurm.slurm import scheduler

P = TypeVar("P", bound="str | os.PathLike[str]")  # an export path, as the caller gives it
PHASES = (
    "bring_up",
    "model_load",
    "productive",
    "lost",
    "checkpoint",
    "evaluation",
    "hang",
    "stopping",
    "spare",
    "unaccounted",
)
_AFTER = {
    "load": "model_load",
    "saving": "checkpoint",
    "after-save": "checkpoint",
    "eval": "evaluation",
    "after-eval": "evaluation",
    "finished": "stopping",
}
"""The phase a trainer event starts (a step and a save without an after-save are decided in `_attempt_segments`)."""
FAULT_KINDS = ("node-failure", "hang", "preempted", "slurm-requeue", "lost", "driver-error", "setup-error")
"""Attempt ends that came without a notice: the interruptions the checkpoint interval has to pay for."""


class _Allocation(TypedDict):
    job: str
    start: float
    end: float
    nodes: int
    submit: float | None


class PhaseSeconds(TypedDict):
    """Node-seconds per phase: every allocated node-second in exactly one (the guide's "The goodput ledger")."""

    bring_up: float  # allocation start to the trainer's first event: the batch shell, preflight, Ray
    model_load: float
    productive: float  # the last training of each step
    lost: float  # steps trained and later redone; a step cut off unsaved
    checkpoint: float  # a step's end to the save acknowledged, and the HF export after it
    evaluation: float  # evaluation inside training
    hang: float  # the last heartbeat to the watchdog's finding
    stopping: float  # stop, requeue, in-job restart: the rest of an attempt, the gaps between attempts, after the last
    spare: float  # spare nodes beside the Ray step
    unaccounted: float  # what no source explains


class GoodputJson(TypedDict):
    """Where a run's GPU-hours went, in node-seconds."""

    allocated_node_seconds: float  # ElapsedRaw x NNodes over every record of the run's jobs
    productive_node_seconds: float
    ratio: float | None  # productive / allocated; null before anything was allocated
    phases: PhaseSeconds
    queue_wait_seconds: float  # wall seconds: submit to the first start, each requeue's end to the next start
    accounting: str  # where allocated_node_seconds came from: `sacct`, or `run record` when accounting gave nothing


class SegmentJson(TypedDict):
    """A span of one attempt in one phase (epoch seconds)."""

    phase: str  # a phase of `phases`
    start: float
    end: float
    nodes: int
    step: NotRequired[int]  # the step it trained or saved, where it has one


class RestartPhases(TypedDict, total=False):
    """Where an in-job restart's seconds went, from the fault to the end of the first resumed step; a phase not
    reached (or not recorded) is null. Empty for an attempt that is not an in-job restart."""

    warm: bool  # the head's Ray and the healthy nodes' stayed up (cold: every node's Ray restarted)
    why: str  # why warm or cold
    detection: float | None  # the fault to the batch shell's decision
    stopping: float | None  # to the old driver's (or the old cluster's) end
    bring_up: float | None  # to every node and GPU registered again
    model_load: float | None  # to the first resumed step: the driver's start and the model's load
    first_step: float | None  # that step
    total: float | None
    resumed_steps: int


class TimelineRestart(RestartPhases, total=False):
    """An in-job restart's phases and the epoch second they count from; empty for any other attempt."""

    fault_at: float | None


class TimelineLine(TypedDict):
    """One attempt: its span, how it ended, and its phases in order."""

    job_id: str
    attempt: str  # its label: `2`, or `2.1` for an in-job restart
    start: float  # epoch seconds
    end: float
    nodes: int
    end_kind: str  # how it ended (notice, hang, node-failure, ...), or `running`
    step_at_end: int | None  # the checkpoint it ended with
    segments: list[SegmentJson]
    restart: TimelineRestart


class LedgerJson(GoodputJson):
    """Where a run's GPU-hours went, in node-seconds, with the timeline of its attempts."""

    timeline: list[TimelineLine]


@dataclass
class Segment:
    phase: str
    start: float
    end: float
    nodes: int
    step: int | None = None

    @property
    def node_seconds(self) -> float:
        return max(self.end - self.start, 0.0) * self.nodes


@dataclass
class AttemptLine:
    job_id: str
    attempt: str
    start: float
    end: float
    nodes: int
    end_kind: str
    step_at_end: int | None
    segments: list[Segment] = field(default_factory=list)
    restart: dict[str, Any] = field(default_factory=dict)
    """An in-job restart's phases (`restart_phases`) and `fault_at`, the epoch second they count from; {} otherwise."""


@dataclass
class Ledger:
    allocated_node_seconds: float = 0.0
    productive_node_seconds: float = 0.0
    ratio: float | None = None
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    queue_wait_seconds: float = 0.0
    accounting: str = "sacct"
    """Where allocated_node_seconds came from: `sacct` (ElapsedRaw x NNodes), or `run record` when accounting
    gave nothing."""
    timeline: list[AttemptLine] = field(default_factory=list)

    def largest_losses(self, count: int = 2) -> list[tuple[str, float]]:
        losses = [(p, s) for p, s in self.phases.items() if p != "productive" and s > 0]
        return sorted(losses, key=lambda item: -item[1])[:count]

    def summary(self, gpus_per_node: int) -> str:
        """`goodput 81.2 % of 0.52 GPU-h; largest losses: bring_up 9.1 %, stopping 4.0 %`."""
        if not self.allocated_node_seconds:
            return "goodput: nothing allocated yet"
        share = ", ".join(f"{p} {100 * s / self.allocated_node_seconds:.1f} %" for p, s in self.largest_losses())
        hours = self.allocated_node_seconds * gpus_per_node / 3600
        return (
            f"goodput {100 * (self.ratio or 0):.1f} % of {hours:.2f} GPU-h allocated"
            + (f"; largest losses: {share}" if share else "")
            + (f"; {self.queue_wait_seconds:.0f} s queued" if self.queue_wait_seconds else "")
        )

    def to_json(self) -> LedgerJson:
        out = asdict(self)
        for line in out["timeline"]:  # a segment's step only where it has one
            line["segments"] = [{k: v for k, v in s.items() if k != "step" or v is not None} for s in line["segments"]]
        return cast(LedgerJson, out)  # the fields' names are its keys (tests/verbs/test_json_schemas.py reads it)


def slurm_time(text: str) -> float | None:
    """Epoch seconds of sacct's `2026-12-01T22:35:10` (the cluster's local time), None for Unknown/None."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except (TypeError, ValueError):
        return None


def stop_began(attempt_dir: Path) -> float | None:
    """When the attempt's end began: the first failure a node recorded, or the batch shell's stop of the Ray step."""
    failure = read_failure(attempt_dir) or {}
    stop = read_json(attempt_dir / STOP_FILE) or {}
    times = [float(failure["time"])] if failure.get("time") else []
    if stop.get("time") is not None:
        times.append(float(stop["time"]) - float(stop.get("seconds") or 0.0))
    return min(times) if times else None


RESTART_PHASES = ("detection", "stopping", "bring_up", "model_load", "first_step")


def restart_phases(attempt: Attempt, events: list[dict[str, Any]]) -> RestartPhases:
    """Where an in-job restart's seconds went, from the fault to the end of the first resumed step: detection (the
    fault to the batch shell's decision), stopping (to the old driver's or the old cluster's end), bring_up (to every
    node and GPU registered again), model_load (to the first resumed step: the driver's start and the model's
    load), first_step (that step); with `warm`, `why`, `total` and `resumed_steps`. {} for an attempt that is not an
    in-job restart; a phase not reached (or not recorded) is None."""
    times = attempt.restart
    if not attempt.in_job or not times:
        return {}
    mine = [e for e in events if e.get("attempt") == attempt.label and e["t"] >= (attempt.start_time or 0.0)]
    first = next((i for i, e in enumerate(mine) if e.get("phase") == "step"), None)  # a step's event: its start
    first_done = None
    if first is not None:
        first_done = mine[first + 1]["t"] if first + 1 < len(mine) else (attempt.end_time if attempt.ended else None)
    marks = [times.get(key) for key in ("fault_at", "decided_at", "stopped_at", "ready_at")]
    marks += [mine[first]["t"] if first is not None else None, first_done]
    steps = [e for e in mine if e.get("phase") == "step"]
    detection, stopping, bring_up, model_load, first_step = (  # RESTART_PHASES, in order
        round(end - begin, 2) if begin is not None and end is not None else None
        for begin, end in itertools.pairwise(marks)
    )
    total = round(first_done - marks[0], 2) if first_done is not None and marks[0] is not None else None
    return {
        "warm": bool(times.get("warm")),
        "why": times.get("why", ""),
        "detection": detection,
        "stopping": stopping,
        "bring_up": bring_up,
        "model_load": model_load,
        "first_step": first_step,
        "total": total,
        "resumed_steps": len(steps),
    }


def _attempt_segments(
    attempt: Attempt,
    start: float,
    events: list[dict[str, Any]],
    end: float,
    nodes: int,
    stopped_at: float | None = None,
) -> list[Segment]:
    """Steps are judged later; one still running when the attempt's end began (`stopped_at`) is cut off there."""
    mine = [e for e in events if e.get("attempt") == attempt.label and start <= e["t"] <= end + 1]
    segments: list[Segment] = []
    begin, phase, step = start, "bring_up", None
    for index, event in enumerate(mine):
        following = mine[index + 1]["phase"] if index + 1 < len(mine) else None
        segments.append(Segment(phase, begin, event["t"], nodes, step))
        begin, step = event["t"], event.get("step")
        if event["phase"] == "step":
            phase = "step"
        elif event["phase"] == "saving" and following != "after-save":
            phase = "step"  # nothing was saved: the end of a step (its logging, the weight sync) is the step's
        else:
            phase = _AFTER.get(event["phase"], "stopping")
    hang_at = attempt.extra.get("hang_detected_at") if attempt.end_kind == "hang" else None
    if hang_at:
        segments.append(Segment("hang", begin, min(float(hang_at), end), nodes, step))
        segments.append(Segment("stopping", min(float(hang_at), end), end, nodes))
    elif phase == "step":
        cut = min(max(stopped_at or end, begin), end)
        segments.append(Segment("cut-off", begin, cut, nodes, step))  # killed mid-step: never saved
        segments.append(Segment("stopping", cut, end, nodes))
    else:
        segments.append(Segment(phase if phase in ("bring_up", "model_load") else "stopping", begin, end, nodes, step))
    return [s for s in segments if s.end > s.start]


def ledger(
    run: RunRecord, events: list[dict[str, Any]], records: list[dict[str, str]], now: float | None = None
) -> Ledger:
    now = time.time() if now is None else now
    out = Ledger()
    attempts = sorted(  # (job id, attempt, its start) of every attempt that started
        ((job_id, a, a.start_time) for job_id, job in run.train_jobs.items() for a in job.attempts if a.start_time),
        key=lambda item: item[2],
    )
    allocations: list[_Allocation] = []
    for row in records:
        start, end = slurm_time(row.get("Start", "")), slurm_time(row.get("End", ""))
        if start is None or row.get("State", "").startswith("PENDING"):
            continue
        nnodes = int(row["NNodes"]) if row.get("NNodes", "").isdigit() else 0
        elapsed = int(row["ElapsedRaw"]) if row.get("ElapsedRaw", "").isdigit() else 0
        allocations.append(
            {
                "job": row["JobID"].split("_")[0].split(".")[0],
                "start": start,
                "end": end if end is not None else start + elapsed,
                "nodes": nnodes,
                "submit": slurm_time(row.get("Submit", "")),
            }
        )
        out.allocated_node_seconds += elapsed * nnodes
    if not allocations:  # no accounting: each attempt's own span stands in for its allocation
        allocations = [
            {"job": j, "start": began, "end": a.end_time or now, "nodes": len(a.nodes) or 1, "submit": None}
            for j, a, began in attempts
        ]
    steps: list[tuple[int, Segment]] = []  # (timeline index, a step's segment)
    for allocation in allocations:
        inside = [
            (j, a, began)
            for j, a, began in attempts
            if j == allocation["job"] and allocation["start"] - 2 <= began <= allocation["end"] + 2
        ]
        cursor = allocation["start"]
        for index, (job_id, attempt, began) in enumerate(inside):
            # Slurm's allocation ends when it says (a requeued job's batch shell may record its end later).
            end = min(attempt.end_time or now, allocation["end"])
            used = len(attempt.nodes) or allocation["nodes"]
            gap = "bring_up" if index == 0 else "stopping"  # before the first attempt; a restart between two
            line = AttemptLine(
                job_id,
                attempt.label,
                began,
                end,
                used,
                attempt.end_kind or "running",
                attempt.checkpoint_at_end,
            )
            line.segments.append(Segment(gap, cursor, began, allocation["nodes"]))
            folder = Path(run.log_dir) / f"{job_id}-{attempt.label}" if run.log_dir else None
            line.segments += _attempt_segments(
                attempt, began, events, end, used, stop_began(folder) if folder else None
            )
            if allocation["nodes"] > used:
                line.segments.append(Segment("spare", began, end, allocation["nodes"] - used))
            if restart := restart_phases(attempt, events):
                line.restart = {**restart, "fault_at": attempt.restart.get("fault_at")}
            line.segments = [s for s in line.segments if s.end > s.start]
            steps += [(len(out.timeline), s) for s in line.segments if s.phase in ("step", "cut-off")]
            out.timeline.append(line)
            cursor = end
        if inside and allocation["end"] > cursor:
            out.timeline[-1].segments.append(Segment("stopping", cursor, allocation["end"], allocation["nodes"]))
        elif not inside:
            out.phases["bring_up"] += (allocation["end"] - allocation["start"]) * allocation["nodes"]
    # The last training of each step number counts; an earlier one was redone, a cut-off one never saved.
    last = {segment.step: index for index, segment in steps if segment.phase == "step"}
    for index, segment in steps:
        segment.phase = "productive" if segment.phase == "step" and last[segment.step] == index else "lost"
    for line in out.timeline:
        for segment in line.segments:
            out.phases[segment.phase] += segment.node_seconds
    if not out.allocated_node_seconds:
        out.accounting = "run record"
        out.allocated_node_seconds = sum(v for k, v in out.phases.items() if k != "unaccounted")
    out.phases["unaccounted"] = max(out.allocated_node_seconds - sum(out.phases.values()), 0.0)
    out.productive_node_seconds = out.phases["productive"]
    out.ratio = out.productive_node_seconds / out.allocated_node_seconds if out.allocated_node_seconds else None
    out.queue_wait_seconds = _queue_wait(allocations)
    out.phases = {k: round(v, 1) for k, v in out.phases.items()}
    return out


def _queue_wait(allocations: list[_Allocation]) -> float:
    """Pending time: submit -> first start, then each requeued instance's end -> the next start."""
    wait, previous_end = 0.0, None
    for allocation in sorted(allocations, key=lambda a: a["start"]):
        since = previous_end if previous_end is not None else allocation["submit"]
        if since is not None and allocation["start"] > since:
            wait += allocation["start"] - since
        previous_end = allocation["end"]
    return round(wait, 1)


def run_ledgers(
    export_paths: Sequence[P] | Mapping[P, RunRecord],
    now: float | None = None,
    records: list[dict[str, str]] | None = None,
) -> dict[P, Ledger]:
    """export path -> its run's ledger, with ONE sacct call for every run's jobs (a 64-point sweep asks once), or
    none where the caller already read the allocation `records` (status: in the same call as its job rows).
    `export_paths` may map each to its run's record, read already (status reads each once)."""
    runs = (
        dict(export_paths)
        if isinstance(export_paths, Mapping)
        else {path: RunStore(path).read() for path in export_paths}
    )
    if records is None:
        try:
            records = scheduler.allocation_records([job for run in runs.values() for job in run.train_jobs])
        except scheduler.SlurmCommandError:
            records = []  # no accounting here: the run record's own spans stand in (`accounting` says so)
    return {
        path: ledger(
            run,
            read_events(run.ckpt_path) if run.ckpt_path else [],
            [r for r in records if r["JobID"].split("_")[0].split(".")[0] in run.train_jobs],
            now,
        )
        for path, run in runs.items()
    }


def run_ledger(export_path: P, now: float | None = None, records: list[dict[str, str]] | None = None) -> Ledger:
    return run_ledgers([export_path], now, records)[export_path]


@dataclass(frozen=True)
class Measured:
    """A run's own numbers, for `plan`: medians per attempt (seconds), None where the run has none."""

    attempts: int
    allocated_hours: float
    bring_up_s: float | None
    model_load_s: float | None
    step_s: float | None
    save_s: float | None
    faults: int
    interruptions_per_day: float | None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def measured(result: Ledger) -> Measured:
    bring_up: list[float] = []
    load: list[float] = []
    saves: list[float] = []
    steps: dict[tuple[int, int | None], float] = {}
    for index, line in enumerate(result.timeline):
        phase_s: dict[str, float] = {}
        for segment in line.segments:
            phase_s[segment.phase] = phase_s.get(segment.phase, 0.0) + segment.end - segment.start
            if segment.phase == "productive":
                steps[(index, segment.step)] = steps.get((index, segment.step), 0.0) + segment.end - segment.start
        bring_up.append(phase_s.get("bring_up", 0.0))
        if "model_load" in phase_s:
            load.append(phase_s["model_load"])
        # Consecutive checkpoint segments are one save.
        saves += [
            sum(s.end - s.start for s in run)
            for phase, run in itertools.groupby(line.segments, lambda s: s.phase)
            if phase == "checkpoint"
        ]
    hours = sum(line.end - line.start for line in result.timeline) / 3600
    faults = sum(1 for line in result.timeline if line.end_kind in FAULT_KINDS)
    return Measured(
        attempts=len(result.timeline),
        allocated_hours=hours,
        bring_up_s=_median(bring_up),
        model_load_s=_median(load),
        step_s=_median(list(steps.values())),
        save_s=_median(saves),
        faults=faults,
        interruptions_per_day=faults / (hours / 24) if hours > 0 else None,
    )
