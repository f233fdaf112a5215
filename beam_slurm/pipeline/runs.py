"""Runs: what the training job and the operator verbs write into the run record, and the one resolver from what a
user types to a run.

Every run has a record (`beam_slurm.core.run_record`, stored by `beam_slurm.core.run_store`), however it was
started: `beam-slurm submit` writes it with the submission, and the training job itself writes (or adds to) it at
every attempt, so a job started with plain `sbatch sbatch/train_*.sh` is a run too. The training job adds its entry
under `train_jobs` (its attempts: start, nodes, checkpoints, how each ended) and the `bad_nodes` its attempts found
(later attempts of the same job exclude them; a new job of the run starts with every node: the site may have
repaired it); `requeue` and `stop` write the operator's `wanted` outcome.

`resolve_run` turns a run folder (the export path, its `beam_run/` or `run.json`), a run name (looked up under the
exports root: `--exports-root`, else $BEAM_EXPORTS_ROOT, else $HOME/exports, then the export path the current
environment gives that name) or a job id (the per-user job index, then the runs under the exports root) into the
run's export path. `status`, `report`, `requeue` and `stop` all take RUN through it.
"""

from __future__ import annotations

import getpass
import os
import time
from pathlib import Path

from beam_slurm.core import layout
from beam_slurm.core.atomic_files import read_json, write_text
from beam_slurm.core.errors import UserError
from beam_slurm.core.run_record import Attempt, BadNode, RunRecord, TrainJob, Wanted, read_record
from beam_slurm.core.run_store import RunStore, now

EXPORTS_ROOT_ENV = "BEAM_EXPORTS_ROOT"
"""Where run names are looked up (default $HOME/exports, the seed's export root)."""


class RunNotFound(UserError, ValueError):
    """The argument names no run; the message says where we looked and what to pass instead."""


# --- resolving ----------------------------------------------------------------------------------------------------

def exports_root(given: str | None = None) -> Path:
    """The folder run names are looked up in."""
    root = given or os.environ.get(EXPORTS_ROOT_ENV) or str(Path(os.environ.get("HOME", str(Path.home()))) / "exports")
    return Path(root).expanduser()


def remember_job(job_id: str, export_path: str | os.PathLike) -> None:
    """Index a training job id under this user's state folder, so `RUN` may be the job id (best effort)."""
    try:
        write_text(layout.state_dir() / layout.JOBS_INDEX_DIRNAME / str(job_id), str(export_path) + "\n")
    except OSError:
        pass


def has_record(export_path: Path) -> bool:
    return layout.run_file(export_path).is_file()


def run_folder(path: Path) -> Path | None:
    """The export path for a path that is one (or its beam_run/ or run.json), else None."""
    if path.is_file() and path.name == layout.RUN_FILE and path.parent.name == layout.RUN_DIRNAME:
        return path.parent.parent
    if path.is_dir():
        if path.name == layout.RUN_DIRNAME and (path / layout.RUN_FILE).is_file():
            return path.parent
        if has_record(path):
            return path
    return None


def _knows_job(record_file: Path, job_id: str) -> bool:
    try:
        return job_id in read_record(read_json(record_file), str(record_file)).job_ids()
    except UserError:
        return False


def resolve_run(target: str, exports_root_given: str | None = None) -> Path:
    """The export path of the run named by `target` (a run folder, a run name or a job id); RunNotFound if none."""
    path = Path(target).expanduser()
    found = run_folder(path)
    if found is not None:
        return found
    here = f"{layout.RUN_DIRNAME}/{layout.RUN_FILE}"
    if path.exists():
        raise RunNotFound(f"{path} is not a run folder: it has no {here} (a training job writes it at its first "
                          "attempt; pass the run's export path)")
    root = exports_root(exports_root_given)
    index = layout.state_dir() / layout.JOBS_INDEX_DIRNAME
    if target.isdigit():
        try:
            indexed = Path((index / target).read_text().strip())
            if has_record(indexed) and _knows_job(layout.run_file(indexed), target):
                return indexed
        except OSError:
            pass
        for record in sorted(root.glob(f"*/{here}")):
            if _knows_job(record, target):
                return record.parent.parent
        raise RunNotFound(f"no run knows job {target}: looked in {index} and under {root}; pass the run's export "
                          "path")
    candidates = [root / target]
    try:
        from beam_slurm.config.load import load_config

        candidates.append(Path(load_config([f"run_name={target}"], validate=False).paths.export_path))
    except Exception:  # a broken environment must not hide the other candidates
        pass
    for candidate in candidates:
        if has_record(candidate):
            return candidate
    raise RunNotFound(f"no run named {target!r}: looked for {here} under "
                      f"{', '.join(str(c) for c in candidates)}; pass the run's export folder or a job id")


# --- reading the training jobs --------------------------------------------------------------------------------------

def resumable(run: RunRecord) -> TrainJob | None:
    """The latest training job when it ended stopped or failed resumable (`submit` then resumes), else None."""
    job = run.latest_train_job()
    if job and job.resumable and job.outcome in ("stopped", "failed"):
        return job
    return None


# --- written by the training job ----------------------------------------------------------------------------------

def begin_attempt(store: RunStore, *, job_id: str, attempt: int, nodes: list[str], checkpoint: int | None,
                  run_info: dict, partition: str, nodes_needed: int, user_exclude: list[str]) -> tuple[TrainJob, list[str]]:
    """Record an attempt's start; (the job's entry, the job's bad nodes) as they stand now.

    The run's top-level fields (name, recipe, paths) are filled in when the job was started without `submit`. An
    earlier attempt of this job that never recorded its end (its batch host died, or it was killed at once) is
    closed as 'lost'; it counts against progress when it left no newer checkpoint."""

    def change(run: RunRecord) -> tuple[TrainJob, list[str]]:
        for key, value in run_info.items():  # filled in when the job was started without `submit`
            if key in run.__dataclass_fields__:
                if not getattr(run, key):
                    setattr(run, key, value)
            else:
                run.extra.setdefault(key, value)
        job_id_ = str(job_id)
        if job_id_ not in run.train_jobs:
            started_by = "beam-slurm submit" if job_id_ in run.submitted_job_ids() else "sbatch"
            run.train_jobs[job_id_] = TrainJob(job_id=job_id_, started_by=started_by, partition=partition,
                                               nodes_needed=nodes_needed, user_exclude=list(user_exclude))
        job = run.train_jobs[job_id_]
        for earlier in job.attempts:
            if earlier.end is None and earlier.attempt != attempt:
                earlier.end, earlier.end_kind, earlier.decision = now(), "lost", "requeued by Slurm"
                earlier.end_reason = ("ended without a word from the batch shell (its node was lost, or Slurm killed "
                                      "it at once)")
                earlier.counts_against_progress = checkpoint is None or checkpoint == earlier.checkpoint_at_start
                earlier.checkpoint_at_end = checkpoint
        job.attempts = [a for a in job.attempts if a.attempt != attempt]
        job.attempts.append(Attempt(attempt=attempt, start=now(), start_time=time.time(), nodes=list(nodes),
                                    checkpoint_at_start=checkpoint))
        job.outcome = None
        return job, run.bad_node_names(job_id_)

    return store.update(change)


def end_attempt(store: RunStore, *, job_id: str, attempt: int, end: dict, bad_nodes: list[tuple[str, str]],
                outcome: str | None, outcome_reason: str, resumable_end: bool, wanted_handled: bool) -> None:
    """Record how an attempt ended (`end`: Attempt fields such as end_kind, end_reason, saved_step,
    checkpoint_at_end), the bad nodes it found ((node, reason) pairs), and the job's outcome when it ends here."""

    def change(run: RunRecord) -> None:
        job = run.train_job(job_id)
        entry = job.attempt(attempt)
        if entry is None:
            entry = Attempt(attempt=attempt)
            job.attempts.append(entry)
        entry.end, entry.end_time = now(), time.time()
        for key, value in end.items():
            if key in entry.__dataclass_fields__:
                setattr(entry, key, value)
            else:
                entry.extra[key] = value
        listed = set(run.bad_node_names(job_id))
        for node, reason in bad_nodes:
            if node not in listed:
                run.bad_nodes.append(BadNode(node=node, reason=reason, job_id=str(job_id), attempt=attempt,
                                             time=now()))
        if outcome:
            job.outcome, job.outcome_reason, job.resumable = outcome, outcome_reason, resumable_end
        wanted = run.wanted_for(job_id)
        if wanted_handled and wanted is not None:
            wanted.handled_by_attempt, wanted.handled_at = attempt, now()

    store.update(change)


def set_excluded(store: RunStore, job_id: str, nodes: list[str]) -> None:
    def change(run: RunRecord) -> None:
        run.train_job(job_id).excluded_nodes = list(nodes)

    store.update(change)


# --- written by the operator verbs --------------------------------------------------------------------------------

def set_wanted(store: RunStore, *, job_id: str, action: str, timeout_s: float) -> Wanted:
    """Write the operator's wanted outcome for the job (it replaces an earlier unhandled one)."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = str(os.getuid())
    wanted = Wanted(action=action, job_id=str(job_id), requested_at=now(), requested_time=time.time(), by=user,
                    timeout_s=float(timeout_s))

    def change(run: RunRecord) -> Wanted:
        run.wanted = wanted
        return wanted

    return store.update(change)
