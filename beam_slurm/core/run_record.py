"""The run record (`<export_path>/beam_run/run.json`), typed; each checkpoint's evaluation is its own file under
`beam_run/evals/`, so the training job never rewrites run.json for them.

JSON keys are field names; a record without `schema_version` (v1) reads as is; unknown keys stay in `extra`.
"""

from __future__ import annotations

import dataclasses
import time
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from beam_slurm.core.errors import UserError
from beam_slurm.core.layout import attempt_label

SCHEMA_VERSION = 2  # 1: the same keys, before schema_version was written
T = TypeVar("T")


@dataclass(kw_only=True)
class _Entry:
    """What every object of the record has: the keys this version does not know, written back unchanged."""

    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class StageEntry(_Entry):
    stage: str = ""  # data, container or train
    status: str = ""  # submitted, or why not (skipped, reused, ...)
    job_id: str | None = None
    reason: str | None = None  # Why a stage was skipped
    identity: str | None = None  # What the stage's output is (the reuse check compares it)
    depends_on: list[str] = field(default_factory=list)  # Job ids it waits for
    command: str | None = None  # The rendered sbatch command, shell-quoted
    token: str | None = None  # The submission token in the job's --comment (squeue finds the job by it)


@dataclass
class Submission(_Entry):
    submitted_at: str = ""
    dependency_type: str = ""
    stages: list[StageEntry] = field(default_factory=list)


@dataclass
class Attempt(_Entry):
    """One attempt (one start of the batch shell) of a training job."""

    attempt: int = 0  # SLURM_RESTART_COUNT of the attempt
    in_job: int = 0  # 0: the allocation's first Ray step; 1, 2, ...: restarted in the same allocation
    replaced: list[str] = field(default_factory=list)  # `old -> new` for each node an in-job restart replaced
    start: str | None = None
    start_time: float | None = None
    nodes: list[str] = field(default_factory=list)
    checkpoint_at_start: int | None = None
    end: str | None = None  # When it ended (None while it runs)
    end_time: float | None = None
    end_kind: str = ""  # How it ended (beam_slurm.policy.requeue's end kinds, or `lost`)
    end_reason: str = ""
    saved_step: int | None = None  # The step saved on the notice that ended it
    checkpoint_at_end: int | None = None
    counts_against_progress: bool = False
    decision: str = ""  # requeue, requeued by Slurm, or end (<exit status>)
    exit_status: int | None = None
    hang_dumps: str | None = None
    """The attempt's hang/ folder (stack dumps of every node) when it ended as a hang."""
    restart: dict[str, Any] = field(default_factory=dict)
    """An in-job attempt's restart: warm, why, and the epoch seconds `policy.goodput.restart_phases` splits."""

    @property
    def ended(self) -> bool:
        return bool(self.end)

    @property
    def label(self) -> str:
        """`2`, or `2.1` for the first in-job restart of the allocation of attempt 2."""
        return attempt_label(self.attempt, self.in_job)

    @property
    def kind(self) -> str:
        return "in-job" if self.in_job else "requeue" if self.attempt else "first"


@dataclass
class TrainJob(_Entry):
    job_id: str = ""
    started_by: str = ""  # beam-slurm submit, or sbatch
    stdout: str = ""  # The batch log, as Slurm named it at the first attempt (`logs` finds it once Slurm forgot)
    partition: str = ""
    nodes_needed: int = 0
    user_exclude: list[str] = field(default_factory=list)  # The user's own --exclude
    excluded_nodes: list[str] = field(default_factory=list)  # The ExcNodeList the job set after finding bad nodes
    attempts: list[Attempt] = field(default_factory=list)
    outcome: str | None = None  # completed, stopped, failed or cancelled; None while it runs
    outcome_reason: str = ""
    resumable: bool = False
    avoided_bad_nodes: bool = False  # The one requeue of an attempt that landed on a recorded bad node was spent

    def attempt(self, number: int, in_job: int = 0) -> Attempt | None:
        return next((a for a in self.attempts if (a.attempt, a.in_job) == (number, in_job)), None)


@dataclass
class Wanted(_Entry):
    """The operator's wanted outcome of a running job (`beam-slurm requeue|stop`)."""

    action: str = ""
    job_id: str = ""
    requested_at: str = ""
    requested_time: float = 0.0
    by: str = ""
    timeout_s: float = 0.0
    handled_by_attempt: int | None = None
    handled_in_job: int = 0  # with handled_by_attempt: the in-job attempt of that allocation that handled it
    handled_at: str | None = None


@dataclass
class Cancel(_Entry):
    """One `beam-slurm cancel` of the run: the jobs it ended while they were queued or running."""

    requested_at: str = ""
    by: str = ""
    job_ids: list[str] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)  # Job id -> its state when cancelled


@dataclass
class BadNode(_Entry):
    """A node an attempt failed on; later attempts of the same job exclude it."""

    node: str = ""
    reason: str = ""
    job_id: str = ""
    attempt: int | None = None
    time: str = ""


@dataclass
class Tracking(_Entry):
    """The run's experiment tracker identity (one W&B run across attempts)."""

    logger: str = ""
    wandb_run_id: str | None = None
    chosen_by_job: str = ""  # The training job whose first attempt chose the id
    chosen_at: str = ""


@dataclass
class RunRecord(_Entry):
    schema_version: int = SCHEMA_VERSION
    run_name: str = ""
    recipe: str = ""
    export_path: str = ""
    ckpt_path: str = ""
    log_dir: str = ""
    max_training_steps: int | None = None
    overrides: list[str] = field(default_factory=list)
    data_overrides: list[str] = field(default_factory=list)
    sweep_dir: str | None = None
    submissions: list[Submission] = field(default_factory=list)
    train_jobs: dict[str, TrainJob] = field(default_factory=dict)  # By job id, in the order the jobs first wrote
    wanted: Wanted | None = None
    bad_nodes: list[BadNode] = field(default_factory=list)
    tracking: Tracking | None = None
    cancels: list[Cancel] = field(default_factory=list)

    def train_job(self, job_id: str) -> TrainJob:
        """The job's entry, created (empty) when the record has none yet."""
        return self.train_jobs.setdefault(str(job_id), TrainJob(job_id=str(job_id)))

    def latest_train_job(self) -> TrainJob | None:
        return list(self.train_jobs.values())[-1] if self.train_jobs else None

    def submitted_job_ids(self, stage: str | None = None) -> list[str]:
        """Job ids of the submissions' stages (of one stage, when given), oldest first."""
        return [
            str(e.job_id)
            for s in self.submissions
            for e in s.stages
            if e.job_id and (stage is None or e.stage == stage)
        ]

    def job_ids(self) -> set[str]:
        return set(self.train_jobs) | set(self.submitted_job_ids())

    def bad_node_names(self, job_id: str | None = None) -> list[str]:
        """The run's bad nodes; with `job_id`, only those found by that job's attempts."""
        return sorted({b.node for b in self.bad_nodes if b.node and (job_id is None or b.job_id == str(job_id))})

    def wanted_for(self, job_id: str) -> Wanted | None:
        """The operator's wanted outcome for this job, when not handled yet."""
        wanted = self.wanted
        return wanted if wanted and wanted.job_id == str(job_id) and wanted.handled_by_attempt is None else None

    def resumable_job(self) -> TrainJob | None:
        """The latest training job when it ended stopped or failed resumable (`submit` then resumes), else None."""
        job = self.latest_train_job()
        return job if job and job.resumable and job.outcome in ("stopped", "failed") else None

    def record_cancel(self, cancel: Cancel) -> None:
        """Note a cancel; the training jobs it ended are over for good (`submit` starts afresh, resuming nothing)."""
        self.cancels.append(cancel)
        trains = set(self.train_jobs) | set(self.submitted_job_ids("train"))
        for job_id in (j for j in cancel.job_ids if j in trains):
            job = self.train_job(job_id)  # one cancelled while pending has no entry yet
            job.outcome, job.resumable = "cancelled", False
            job.outcome_reason = f"cancelled by {cancel.by} with beam-slurm cancel at {cancel.requested_at}"

    def fill_in(self, run_info: dict[str, Any]) -> None:
        """The run's own fields (name, recipe, paths) where still empty: a job started without `submit`."""
        for key, value in run_info.items():
            if key not in self.__dataclass_fields__:
                self.extra.setdefault(key, value)
            elif not getattr(self, key):
                setattr(self, key, value)

    def begin_attempt(
        self,
        *,
        job_id: str,
        attempt: int,
        nodes: list[str],
        checkpoint: int | None,
        when: str,
        partition: str,
        nodes_needed: int,
        user_exclude: list[str],
        in_job: int = 0,
        replaced: list[str] | None = None,
        stdout: str = "",
        restart: dict[str, Any] | None = None,
    ) -> tuple[TrainJob, list[str]]:
        """An earlier attempt with no recorded end is closed as 'lost' (against progress if no newer checkpoint)."""
        job_id = str(job_id)
        if job_id not in self.train_jobs:
            started_by = "beam-slurm submit" if job_id in self.submitted_job_ids() else "sbatch"
            self.train_jobs[job_id] = TrainJob(
                job_id=job_id,
                started_by=started_by,
                partition=partition,
                nodes_needed=nodes_needed,
                user_exclude=list(user_exclude),
            )
        job = self.train_jobs[job_id]
        job.stdout = stdout or job.stdout
        for earlier in job.attempts:
            if earlier.end is None and (earlier.attempt, earlier.in_job) != (attempt, in_job):
                earlier.end, earlier.end_kind, earlier.decision = when, "lost", "requeued by Slurm"
                earlier.end_reason = (
                    "ended without a word from the batch shell (its node was lost, or Slurm killed it at once)"
                )
                earlier.counts_against_progress = checkpoint is None or checkpoint == earlier.checkpoint_at_start
                earlier.checkpoint_at_end = checkpoint
        job.attempts = [a for a in job.attempts if (a.attempt, a.in_job) != (attempt, in_job)]
        job.attempts.append(
            Attempt(
                attempt=attempt,
                in_job=in_job,
                replaced=list(replaced or []),
                start=when,
                start_time=time.time(),
                nodes=list(nodes),
                checkpoint_at_start=checkpoint,
                restart=dict(restart or {}),
            )
        )
        job.outcome = None
        return job, self.bad_node_names(job_id)

    def end_attempt(
        self,
        *,
        job_id: str,
        attempt: int,
        when: str,
        end: dict[str, Any],
        bad_nodes: list[tuple[str, str]],
        outcome: str | None,
        outcome_reason: str,
        resumable_end: bool,
        wanted_handled: bool,
        in_job: int = 0,
    ) -> None:
        """Record how an attempt ended (`end`: Attempt fields), the bad nodes it found, and the job's outcome."""
        job = self.train_job(job_id)
        entry = job.attempt(attempt, in_job)
        if entry is None:
            entry = Attempt(attempt=attempt, in_job=in_job)
            job.attempts.append(entry)
        entry.end, entry.end_time = when, time.time()
        for key, value in end.items():
            if key in entry.__dataclass_fields__:
                setattr(entry, key, value)
            else:
                entry.extra[key] = value
        listed = set(self.bad_node_names(job_id))
        for node, reason in bad_nodes:
            if node not in listed:
                self.bad_nodes.append(BadNode(node=node, reason=reason, job_id=str(job_id), attempt=attempt, time=when))
        if outcome:
            job.outcome, job.outcome_reason, job.resumable = outcome, outcome_reason, resumable_end
        wanted = self.wanted_for(job_id)
        if wanted_handled and wanted is not None:
            wanted.handled_by_attempt, wanted.handled_in_job, wanted.handled_at = attempt, in_job, when


@dataclass
class EvaluationEntry(_Entry):
    """An evaluation job submitted for one checkpoint (`beam_run/evals/global_step_N.json`)."""

    step: int = 0
    checkpoint: str = ""
    job_id: str | None = None
    submitted_at: str = ""
    command: str | None = None
    earlier_job_ids: list[str] = field(default_factory=list)  # The jobs of earlier submissions for the same checkpoint


class RecordError(UserError):
    """A run record this version cannot read."""


def from_json(cls: type[T], data: Any, where: str = "run.json") -> T:
    """`data` (parsed JSON) as `cls`; unknown keys go to `extra`. RecordError for a shape that is not the record's."""
    if not isinstance(data, dict):
        raise RecordError(
            f"{where}: expected an object, found {type(data).__name__}",
            fix="restore the file from its backup or remove it (the next job writes a new one)",
        )
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {
        name: _convert(hints[name], value, f"{where}.{name}")
        for name, value in data.items()
        if name in known and name != "extra"
    }
    obj = cls(**values)
    obj.extra = {k: v for k, v in data.items() if k not in known}  # type: ignore[attr-defined]
    return obj


def _convert(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner, value, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_json(hint, value, where)
    if origin in (list, dict):
        item = typing.get_args(hint)[-1]
        if not isinstance(value, origin):
            raise RecordError(
                f"{where}: expected {'a list' if origin is list else 'an object'}, found {type(value).__name__}",
                fix="restore the file from its backup or remove it",
            )
        if origin is list:
            return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if hint is str and isinstance(value, (int, float)):
        return str(value)  # job ids were written as numbers by hand-made records
    return value


def to_json(obj: Any) -> Any:
    """The record (or any part of it) as JSON-ready values; `extra` keys come back at their object's level."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != "extra"}
        out.update(getattr(obj, "extra", {}) or {})
        return out
    if isinstance(obj, list):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def read_record(data: Any, where: str = "run.json") -> RunRecord:
    """A parsed run.json (any version this one knows) as a RunRecord; an empty record for None."""
    if data is None:
        return RunRecord()
    version = data.get("schema_version", 1) if isinstance(data, dict) else None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise RecordError(
            f"{where} has schema_version {version}; this beam-slurm reads up to {SCHEMA_VERSION}",
            fix="run the beam-slurm that wrote it (a newer version)",
        )
    record = from_json(RunRecord, data, where)
    record.schema_version = SCHEMA_VERSION
    return record
