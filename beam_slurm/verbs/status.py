"""`beam-slurm status [run dir | run name | sweep dir] [--watch] [--json]`: one table telling a run's (or a sweep's)
story: every stage's job, its state from squeue/sacct, restarts, elapsed time, nodes, why a pending job waits, the
latest complete checkpoint and the latest evaluation result.

Without an argument: the last run or sweep submitted from this account; RUN goes through `runs.resolve_run` (plain
`sbatch` jobs too). One row per training attempt: nodes, the checkpoints it started from and ended with, how it ended. A
stopped job is STOPPED (resumable); one ended for good names the jobs waiting on it that can no longer run and the nodes
its later attempts excluded.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

from rich.console import Group
from rich.live import Live
from rich.text import Text

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, fit_columns, table_console, verb_table
from beam_slurm.core import layout
from beam_slurm.core.errors import UserError
from beam_slurm.core.json_text import json_text
from beam_slurm.core.progress import read_events
from beam_slurm.core.run_record import Attempt, EvaluationEntry, RunRecord, StageEntry
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.evaluation.results import evaluation_dir, finished_metrics
from beam_slurm.launch.manifest import last_target, latest_stages
from beam_slurm.launch.run_results import (
    REHEARSAL_RUN,
    dataset_labels,
    entry_label,
    gather,
    is_rehearsal_run,
    run_config,
)
from beam_slurm.launch.runs import RunNotFound, resolve_runs, sweep_folder
from beam_slurm.policy.goodput import GoodputJson, Ledger, RestartPhases, restart_phases, run_ledgers
from beam_slurm.slurm import outage
from beam_slurm.slurm.scheduler import SlurmCommandError, SlurmUnreachable, noting_outages
from beam_slurm.slurm.submission import FINAL_STATES, JobRecord, JobView, job_view
from beam_slurm.slurm.values import reported_seconds

LOST_REASON = "ended without a word from the batch shell (its node failed, or Slurm killed it)"


class StatusInputError(UserError, ValueError):
    """The argument names no run or sweep; the message says where we looked."""


class EvaluationResult(TypedDict):
    """An evaluation: a training job's latest, or the step an evaluation job evaluated."""

    step: int
    origin: str  # `beam` (our evaluation) or `skyrl` (the trainer's own, during training)
    rehearsal: bool  # made up by a rehearsal (or of its unchanged base weights)
    accuracy: dict[str, float | None]  # dataset (aime2024) -> avg@k for ours, SkyRL's accuracy for theirs


class AttemptJson(TypedDict):
    """One attempt (one start of the batch shell, or one in-job restart) of a training job."""

    attempt: int  # SLURM_RESTART_COUNT of the allocation
    in_job: int  # 0, or the restart inside the allocation (1, 2, ...)
    label: str  # `2`, or `2.1` for an in-job restart: what `logs --attempt` takes
    replaced: list[str]  # `old -> new` for each node an in-job restart replaced
    state: str
    """How it ended (the requeue policy's end kinds), `running`, `lost` (Slurm ended the job and the attempt never
    recorded its end), or `ended` (it recorded its end but not how)."""
    started_at: str | None  # ISO 8601 with the offset
    ended_at: str | None  # null while it runs
    nodes: list[str]
    checkpoint_at_start: int | None
    checkpoint_at_end: int | None
    saved_step: int | None  # the step saved on the notice that ended it
    decision: str | None  # requeue, requeued by Slurm, or end (<exit status>)
    exit_status: int | None
    reason: str
    hang_dumps: str | None  # the stack dumps' folder when a hang ended it
    restart: RestartPhases | None  # for an in-job restart: where its seconds went, else null


class StatusJob(TypedDict):
    """One job of a run: a stage's (data, container, train) or an evaluation's."""

    run: str  # the run's name
    stage: str  # data, container, train or evaluate
    job_id: str | None  # as `sbatch --parsable` prints it; null when the stage was skipped
    state: str  # Slurm's (PENDING, RUNNING, COMPLETED, ...; UNKNOWN when Slurm did not answer), SKIPPED or STOPPED
    restarts: int  # requeues so far
    elapsed_s: int | None  # of the current attempt
    nodes: str | None  # Slurm's node list: `node[1-4]`
    checkpoint: int | None  # train: its latest complete step; evaluate: the step it evaluated
    max_training_steps: int | None  # train only
    evaluation: EvaluationResult | None
    reason: str  # why it waits, why it was skipped, or how it ended
    rehearsal: bool  # trainer.backend=rehearsal: it checks the plumbing, it does not train
    attempts: list[AttemptJson]  # train only: every attempt, in order


class StatusJobs(TypedDict):
    """The table's rows as objects: one per job, attempts nested in their training job."""

    title: str  # `run NAME` or `sweep FOLDER`
    jobs: list[StatusJob]


class StatusJson(StatusJobs):
    """`status --json`: every job of a run or sweep, its state, attempts, checkpoint and evaluation, and the goodput
    ledger. Exit 1 when the controller did not answer (every state UNKNOWN, the rest from the run records)."""

    goodput: GoodputJson | dict[str, GoodputJson]  # the run's ledger; for several runs, by run name
    unanswered: list[str]  # the Slurm daemons that did not answer: `slurmctld`, `slurmdbd`


JSON_OUTPUT = StatusJson


@dataclass
class StatusRow:
    run: str
    stage: str  # data, container, train, or evaluate N
    job_id: str  # '' when the stage was skipped
    state: str  # Slurm's, or SKIPPED
    restarts: int
    elapsed: str  # of the current attempt
    nodes: str
    checkpoint: str  # train rows: latest complete step / max steps
    evaluation: str  # train rows: the run's latest result; evaluate rows: that step's
    reason: str  # why it waits, why it was skipped, or how it ended
    rehearsal: bool = False  # trainer.backend=rehearsal: it checks the plumbing, it does not train
    # The same, typed, for --json:
    step: int | None = None  # train: the latest complete checkpoint; evaluate: the checkpoint evaluated
    max_steps: int | None = None
    results: EvaluationResult | None = None  # the evaluation shown: step, origin, rehearsal, accuracy by dataset
    attempts: list[Attempt] = field(default_factory=list)  # train rows: the job's attempts
    restarts_by_label: dict[str, RestartPhases] = field(default_factory=dict)  # in-job attempts' `restart_phases`


def resolve_targets(target: str | None) -> tuple[dict[Path, RunRecord], str]:
    """(the runs to show: export path -> its record, read once for the whole call; title). Raises StatusInputError."""
    target = target or last_target()
    if not target:
        raise StatusInputError(
            "no run given and nothing submitted from this account yet; pass a run folder, run name or sweep folder"
        )
    path = Path(target).expanduser()
    try:
        found = resolve_runs(target)
    except RunNotFound as exc:
        if path.is_dir():
            raise StatusInputError(
                f"{path} is neither a run folder (with {layout.RUN_DIRNAME}/{layout.RUN_FILE}) nor "
                f"a sweep folder (with {layout.SWEEP_FILE})"
            ) from None
        raise StatusInputError(str(exc)) from None
    runs = read_runs([t.export_path for t in found])
    sweep = sweep_folder(path)
    if sweep is not None:
        return runs, f"sweep {sweep}"
    ((export_path, run),) = runs.items()
    return runs, f"run {run.run_name or export_path.name}"


def read_runs(export_paths: list[Path]) -> dict[Path, RunRecord]:
    return {export_path: RunStore(export_path).read() for export_path in export_paths}


def _results(step: int, origin: str, scores: list[tuple[str, float, bool]]) -> EvaluationResult:
    """An evaluation as --json shows it; (dataset, accuracy, made up by a rehearsal) each."""
    return {
        "step": step,
        "origin": origin,
        "rehearsal": any(r for _, _, r in scores),
        "accuracy": {name: value if math.isfinite(value) else None for name, value, _ in scores},
    }


def _results_text(scores: list[tuple[str, float, bool]]) -> str:
    return ", ".join(f"{name} {value:.3f}{' (rehearsal)' if rehearsal else ''}" for name, value, rehearsal in scores)


def _latest_eval(export_path: Path, run: RunRecord | None = None) -> tuple[str, EvaluationResult | None]:
    try:
        report = gather(export_path, run)
    except OSError:
        return "", None
    if not report.evals:
        return "", None
    step = max(p.step for p in report.evals)
    points = [p for p in report.evals if p.step == step]
    ours = [p for p in points if p.origin == "beam"] or points
    # Datasets by what they are (aime2024, not its source's math_dapo); a rehearsal's numbers say so.
    scores = [(p.dataset or p.data_source, p.accuracy, p.rehearsal) for p in ours]
    text = f"step {step}: {_results_text(scores)}" + ("" if ours[0].origin == "beam" else " (SkyRL)")
    return text, _results(step, ours[0].origin, scores)


def _eval_at(export_path: Path, step: int) -> tuple[str, EvaluationResult | None]:
    try:
        metrics = finished_metrics(evaluation_dir(export_path, step))
    except (OSError, ValueError):
        return "unreadable metrics.json", None
    if not metrics:
        return "", None
    entries = {source: entry for source, entry in metrics.items() if isinstance(entry, dict)}
    labels = {} if all(e.get("dataset") for e in entries.values()) else dataset_labels(export_path)
    scores = [
        (entry_label(source, entry, labels), float(entry.get("avg@k", math.nan)), entry.get("rehearsal") is True)
        for source, entry in entries.items()
    ]
    return _results_text(scores), _results(step, "beam", scores)


def collect(export_paths: list[Path]) -> list[StatusRow]:
    """Rows for every run, with one squeue and one sacct call for all their jobs."""
    return collect_view(read_runs(export_paths))[0]


def collect_view(
    records_read: dict[Path, RunRecord], ask_slurm: bool = True
) -> tuple[list[StatusRow], list[dict[str, str]]]:
    """`collect`'s rows (of the runs' records as read) and the sacct rows they came from, which also hold what the
    goodput ledger reads. Without `ask_slurm` (its controller did not answer) every job's state is UNKNOWN and the
    rest comes from the run records."""
    runs = []
    ids: list[str] = []
    for export_path, run in records_read.items():
        store = RunStore(export_path)
        stages = latest_stages(run)
        shown = {str(s.job_id) for s in stages if s.job_id}
        # Training jobs the run record knows but no submission listed (started with sbatch, or resubmitted so).
        extra = [StageEntry(stage="train", job_id=j) for j in run.train_jobs if j not in shown]
        stages = [s for s in stages if s.stage != "train"] + extra + [s for s in stages if s.stage == "train"]
        evals = store.evaluations()
        runs.append((export_path, run, stages, evals))
        ids += [str(s.job_id) for s in stages if s.job_id] + [str(e.job_id) for e in evals if e.job_id]
    if not ask_slurm:
        view = JobView({job_id: JobRecord(job_id) for job_id in ids}, {})
    else:
        view = job_view(ids) if ids else JobView({}, {})  # one squeue and one sacct call for every run's jobs
    records = view.records

    rows: list[StatusRow] = []
    for export_path, run, stages, evals in runs:
        name = run.run_name or export_path.name
        stage_of_job = {str(s.job_id): s.stage for s in stages if s.job_id}
        for entry in stages:
            job_id = str(entry.job_id or "")
            record = records.get(job_id)
            checkpoint = evaluation = ""
            step = results = None
            if entry.stage == "train":
                step = layout.latest_checkpoint_step(run.ckpt_path)
                steps = run.max_training_steps if run.max_training_steps is not None else "?"
                checkpoint = f"{step}/{steps}" if step is not None else "-"
                evaluation, results = _latest_eval(export_path, run)
            typed: dict[str, Any] = {
                "step": step,
                "max_steps": run.max_training_steps if entry.stage == "train" else None,
                "results": results,
            }
            if record is None:
                rows.append(
                    StatusRow(
                        name, entry.stage, "", "SKIPPED", 0, "", "", checkpoint, evaluation, entry.reason or "", **typed
                    )
                )
                continue
            state, reason = record.state, _reason(record, entry, records, stage_of_job)
            job = run.train_jobs.get(job_id) if entry.stage == "train" else None
            if job:
                if job.outcome == "stopped" and record.final:
                    state = "STOPPED"
                if job.outcome in ("stopped", "failed", "cancelled") and record.final:
                    reason = job.outcome_reason or reason
                if job.excluded_nodes:
                    reason += f"{'; ' if reason else ''}excluded nodes {','.join(job.excluded_nodes)}"
                if record.final and record.state != "COMPLETED":
                    stuck = [f"{j} ({n})" for j, n in view.waiting_on.get(job_id, [])]
                    if stuck:
                        reason += f"; waiting on it and can no longer run: {', '.join(stuck)}"
            restarts = restarts_of(run, job.attempts if job else [])
            rows.append(
                StatusRow(
                    name,
                    entry.stage,
                    job_id,
                    state,
                    record.restarts,
                    record.elapsed,
                    record.nodes,
                    checkpoint,
                    evaluation,
                    reason,
                    **typed,
                    attempts=list(job.attempts) if job else [],
                    restarts_by_label=restarts,
                )
            )
            for attempt in job.attempts if job else []:
                phases = restarts.get(attempt.label, {})
                rows.append(_attempt_row(name, attempt, ended_by_slurm=record.final, restart=phases))
        for evaluation_entry in evals:
            job_id = str(evaluation_entry.job_id or "")
            record = records.get(job_id)
            if record is None:
                continue
            step = evaluation_entry.step
            text, results = _eval_at(export_path, step)
            rows.append(
                StatusRow(
                    name,
                    f"evaluate {step}",
                    job_id,
                    record.state,
                    record.restarts,
                    record.elapsed,
                    record.nodes,
                    str(step),
                    text,
                    _reason(record, evaluation_entry, records, stage_of_job),
                    step=step,
                    results=results,
                )
            )
    rehearsal_runs = {
        run.run_name or export_path.name for export_path, run, _, _ in runs if is_rehearsal_run(export_path)
    }
    for row in rows:
        row.rehearsal = row.run in rehearsal_runs
    return rows, view.accounting


def restarts_of(run: RunRecord, attempts: list[Attempt]) -> dict[str, RestartPhases]:
    """`goodput.restart_phases` of each in-job attempt that recorded its restart, by label (the trainer's events
    read once, only when there is one)."""
    restarted = [a for a in attempts if a.in_job and a.restart]
    if not restarted:
        return {}
    events = read_events(run.ckpt_path) if run.ckpt_path else []
    return {a.label: restart_phases(a, events) for a in restarted}


def restart_text(phases: Mapping[str, Any]) -> str:
    """`warm restart 9.8 s: detection 0.4, stopping 1.2, bring-up 3.1, model load 2.0, first step 1.0` (None: '?')."""
    seconds = {
        name.replace("_", " ").replace("bring up", "bring-up"): phases.get(name)
        for name in ("detection", "stopping", "bring_up", "model_load", "first_step")
    }
    parts = ", ".join(f"{name} {'?' if value is None else f'{value:.1f}'}" for name, value in seconds.items())
    total = phases.get("total")
    kind = "warm" if phases.get("warm") else "cold"
    return f"{kind} restart{'' if total is None else f' {total:.1f} s'}: {parts}"


def _attempt_row(
    name: str, attempt: Attempt, ended_by_slurm: bool = False, restart: RestartPhases | None = None
) -> StatusRow:
    """One attempt of a training job: nodes, checkpoint at start -> end, how it ended."""
    start, end = attempt.checkpoint_at_start, attempt.checkpoint_at_end
    checkpoint = (
        f"{'-' if start is None else start} -> {'-' if end is None else end}"
        if attempt.ended
        else f"from {'-' if start is None else start}"
    )
    kind = attempt.end_kind or ("running" if not attempt.ended else "")
    reason = attempt.end_reason or ""
    if not attempt.ended and ended_by_slurm:
        # The job is over and this attempt never said how it ended: its batch shell died (the batch host failed).
        kind, reason = "lost", LOST_REASON
    if attempt.saved_step is not None and kind in ("notice", "operator-requeue", "stopped"):
        reason = f"saved at step {attempt.saved_step}; {reason}"
    if attempt.hang_dumps:
        reason = f"{reason}; stack dumps in {attempt.hang_dumps}"
    if attempt.in_job:
        replaced = f", replaced {', '.join(attempt.replaced)}" if attempt.replaced else ", same nodes"
        reason = (
            f"in-job restart{replaced}"
            + (f"; {restart_text(restart)}" if restart else "")
            + (f"; {reason}" if reason else "")
        )
    return StatusRow(
        name,
        f"  attempt {attempt.label}",
        "",
        kind,
        attempt.attempt,
        "",
        ",".join(attempt.nodes),
        checkpoint,
        "",
        reason,
    )


def _iso(stamp: float | None, text: str | None) -> str | None:
    """ISO 8601 with a colon in the offset (what datetime.fromisoformat and JavaScript read)."""
    if stamp:
        return datetime.fromtimestamp(stamp).astimezone().isoformat(timespec="seconds")
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").isoformat() if text else None
    except ValueError:
        return text


def status_json(rows: list[StatusRow], title: str) -> StatusJobs:
    """`status --json`'s jobs: one object per job (StatusJob); attempts nested in their job."""
    jobs: list[StatusJob] = [
        {
            "run": r.run,
            "stage": r.stage.partition(" ")[0],
            "job_id": r.job_id or None,
            "state": r.state,
            "restarts": r.restarts,
            "elapsed_s": reported_seconds(r.elapsed),
            "nodes": r.nodes or None,
            "checkpoint": r.step,
            "max_training_steps": r.max_steps,
            "evaluation": r.results,
            "reason": r.reason,
            "rehearsal": r.rehearsal,
            "attempts": [
                {
                    "attempt": a.attempt,
                    "in_job": a.in_job,
                    "label": a.label,
                    "replaced": list(a.replaced),
                    "state": a.end_kind
                    or ("lost" if r.state in FINAL_STATES else "running" if not a.ended else "ended"),
                    "started_at": _iso(a.start_time, a.start),
                    "ended_at": _iso(a.end_time, a.end),
                    "nodes": list(a.nodes),
                    "checkpoint_at_start": a.checkpoint_at_start,
                    "checkpoint_at_end": a.checkpoint_at_end,
                    "saved_step": a.saved_step,
                    "decision": a.decision or None,
                    "exit_status": a.exit_status,
                    "reason": a.end_reason or (LOST_REASON if not a.ended and r.state in FINAL_STATES else ""),
                    "hang_dumps": a.hang_dumps,
                    "restart": r.restarts_by_label.get(a.label) or None,
                }
                for a in r.attempts
            ],
        }
        for r in rows
        if not r.stage.startswith(" ")
    ]  # an attempt's row is nested in its job
    return {"title": title, "jobs": jobs}


def goodput_json(ledger: Ledger) -> GoodputJson:
    """The run's ledger without its timeline (report.json has it)."""
    full = ledger.to_json()
    return {
        "allocated_node_seconds": full["allocated_node_seconds"],
        "productive_node_seconds": full["productive_node_seconds"],
        "ratio": full["ratio"],
        "phases": full["phases"],
        "queue_wait_seconds": full["queue_wait_seconds"],
        "accounting": full["accounting"],
    }


def _reason(record, entry: StageEntry | EvaluationEntry, records: dict, stage_of_job: dict) -> str:
    """Slurm's pending reason, made specific: which upstream job failed; how an ended job ended."""
    if record.state == "PENDING":
        reason = record.reason or "waiting"
        if reason.startswith("Dependency"):
            upstream = [str(j) for j in getattr(entry, "depends_on", None) or []]
            failed = [
                f"{stage_of_job.get(j, 'job')} job {j} {records[j].state}"
                for j in upstream
                if j in records and records[j].final and records[j].state != "COMPLETED"
            ]
            waiting = [
                f"{stage_of_job.get(j, 'job')} job {j}" for j in upstream if j in records and not records[j].final
            ]
            if failed:
                reason += f": {', '.join(failed)}; this job will not start (cancel it or resubmit after a fix)"
            elif waiting:
                reason += f": waits for {', '.join(waiting)}"
        return reason
    if record.state == "COMPLETED":
        return ""
    if record.final:
        return f"exit code {record.exit_code}" if record.exit_code else record.reason
    return "" if record.reason in ("None", "") else record.reason


def render_table(rows: list[StatusRow], title: str, width: int = 160, notes_below: bool = False):
    """The table `width` columns wide; where even that splits words, the evaluation and reason go below it."""
    colours = {
        "COMPLETED": "green",
        "RUNNING": "cyan",
        "PENDING": "yellow",
        "SKIPPED": "dim",
        "FAILED": "red",
        "STOPPED": "magenta",
        "CANCELLED": "red",
        "TIMEOUT": "red",
        "NODE_FAIL": "red",
        "OUT_OF_MEMORY": "red",
    }
    rehearsals = sorted({r.run for r in rows if r.rehearsal})
    caption = f"{', '.join(rehearsals)}: {REHEARSAL_RUN}" if rehearsals else None
    table = verb_table(title, caption=caption, caption_style="red")
    show_run = len({r.run for r in rows}) > 1
    columns = (
        (["run"] if show_run else [])
        + ["stage", "job", "state", "restarts", "elapsed", "nodes", "checkpoint"]
        + ([] if notes_below else ["evaluation", "reason"])
    )
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column in ("stage", "job", "state", "restarts", "elapsed"))
    previous = None
    for r in rows:
        state = f"[{colours.get(r.state, 'white')}]{r.state}[/]"
        stage = f"{r.stage} [red](rehearsal)[/red]" if r.rehearsal and r.stage == "train" else r.stage
        cells = [
            stage,
            r.job_id or "-",
            state,
            str(r.restarts),
            r.elapsed or "-",
            r.nodes or "-",
            r.checkpoint,
            r.evaluation,
            r.reason,
        ][: len(columns) - show_run]
        if show_run:
            cells = [r.run if r.run != previous else ""] + cells
            previous = r.run
        table.add_row(*cells)
    if not fit_columns(table, width) and not notes_below:
        return render_table(rows, title, width, notes_below=True)
    if not notes_below:
        return table
    labels = [" ".join(part for part in (r.run if show_run else "", r.stage.strip(), r.job_id) if part) for r in rows]
    return Group(
        table,
        *(
            Text(f"{label}: {text}")
            for label, r in zip(labels, rows, strict=False)
            for text in (r.evaluation, r.reason)
            if text
        ),
    )


def build_parser():
    verb = VerbArgs("status", __doc__.split("\n\n")[0], settings=False)
    verb.add_argument(
        "target",
        nargs="?",
        metavar="RUN_OR_SWEEP",
        help="run folder, run name or sweep folder (default: the last submitted)",
    )
    verb.add_argument("--watch", action="store_true", help="refresh until every job has ended (Ctrl-C to stop)")
    verb.add_argument("--interval", type=float, default=10.0, help="seconds between refreshes with --watch")
    verb.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    return verb


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        args = verb.parse(argv).args
        if args.interval <= 0:
            raise VerbUsageError("--interval must be positive seconds")
        runs, title = resolve_targets(args.target)
    except (VerbUsageError, StatusInputError) as exc:
        return verb.fail(exc)
    export_paths = list(runs)
    try:
        rows, accounting, missing = collect_answered(runs)
        for line in missing.values():
            print(f"{verb.prefix}{line}", file=sys.stderr)
        # No state of any job without the controller: the question is not answered (1), the records are shown.
        answered = outage.CONTROLLER not in missing
        if args.json:
            ledgers = {
                runs[path].run_name or path.name: goodput_json(ledger)
                for path, ledger in run_ledgers(runs, records=accounting).items()
            }
            goodput = next(iter(ledgers.values())) if len(ledgers) == 1 else ledgers
            output: StatusJson = {**status_json(rows, title), "goodput": goodput, "unanswered": sorted(missing)}
            print(json_text(output))
            return 0 if answered else 1
        console = table_console()
        if not args.watch or not answered:
            console.print(render_table(rows, title, console.width))
            if len(export_paths) == 1:
                gpus = run_config(export_paths[0]).get("cluster.gpus_per_node") or 1
                console.print(run_ledgers(runs, records=accounting)[export_paths[0]].summary(int(gpus)))
            return 0 if answered else 1
        try:
            with Live(render_table(rows, title, console.width), console=console, refresh_per_second=1) as live:
                # Done when every job has ended, or waits for a dependency that can never be satisfied.
                while not all(
                    r.state in ("SKIPPED", "STOPPED")
                    or r.state in FINAL_STATES
                    or r.stage.startswith(" ")
                    or r.reason.startswith("DependencyNeverSatisfied")
                    for r in rows
                ):
                    time.sleep(args.interval)
                    shown = f"{title}  ({time.strftime('%H:%M:%S')})"
                    try:
                        rows = collect(export_paths)
                    except SlurmUnreachable as exc:  # a controller restarting answers again soon: keep asking
                        shown += f"  {exc.who} did not answer; the rows are from before, asking again"
                    live.update(render_table(rows, shown, console.width))
        finally:
            if not console.is_terminal:  # Live ends a terminal's last line, not a log's or a pipe's
                console.line()
    except SlurmCommandError as exc:
        return verb.fail(exc, status=1)
    except KeyboardInterrupt:
        return 0
    return 0


def collect_answered(runs: dict[Path, RunRecord]) -> tuple[list[StatusRow], list[dict[str, str]], dict[str, str]]:
    """`collect_view`, answering as far as Slurm does: (rows, sacct rows, daemon that did not answer -> a line saying
    so and what the rows lack). Without the controller the rows come from the run records, every state UNKNOWN."""
    try:
        with noting_outages() as outages:
            rows, accounting = collect_view(runs)
    except SlurmUnreachable as exc:
        rows, accounting = collect_view(runs, ask_slurm=False)
        return rows, accounting, {exc.daemon: f"no job states (UNKNOWN): {exc}; the rows are from the run records"}
    missing = {
        error.daemon: f"states from squeue only (a job squeue no longer lists shows UNKNOWN; goodput from the run "
        f"records): {error}"
        for error in outages
        if error.daemon == outage.ACCOUNTING
    }
    return rows, accounting, missing
