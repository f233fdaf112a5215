"""Runs: what a run keeps in `<export_path>/beam_run/run.json`, and the one resolver from what a user types to it.

Every run has a record, however it was started: `beam-slurm submit` writes it with the submission, and the training
job itself writes (or adds to) it at every attempt, so a job started with plain `sbatch sbatch/train_*.sh` is a run
too. What the training job adds:

    train_jobs    {job id: {job_id, started_by, partition, nodes_needed, user_exclude, excluded_nodes, outcome,
                  outcome_reason, resumable, attempts: [{attempt, start, nodes, checkpoint_at_start, end, end_kind,
                  end_reason, saved_step, checkpoint_at_end, counts_against_progress, decision}]}}
    wanted        the operator's wanted outcome (`beam-slurm requeue|stop`): {action, job_id, requested_at, by,
                  timeout_s, handled_by_attempt}
    bad_nodes     [{node, reason, job_id, attempt, time}]: nodes an attempt failed on; later attempts of the same job
                  exclude them (a new job of the run starts with every node: the site may have repaired it)

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

from beam_slurm.atomic_files import write_text
from beam_slurm.pipeline.manifest import RUN_DIRNAME, RUN_FILE, RunManifest, now, read_json, state_dir

EXPORTS_ROOT_ENV = "BEAM_EXPORTS_ROOT"
"""Where run names are looked up (default $HOME/exports, the seed's export root)."""
JOBS_INDEX_DIRNAME = "jobs"
"""Per-user folder (beside the `last` pointer) with one file per training job id naming its export path."""


class RunNotFound(ValueError):
    """The argument names no run; the message says where we looked and what to pass instead."""


# --- resolving ----------------------------------------------------------------------------------------------------

def exports_root(given: str | None = None) -> Path:
    """The folder run names are looked up in."""
    root = given or os.environ.get(EXPORTS_ROOT_ENV) or str(Path(os.environ.get("HOME", str(Path.home()))) / "exports")
    return Path(root).expanduser()


def remember_job(job_id: str, export_path: str | os.PathLike) -> None:
    """Index a training job id under this user's state folder, so `RUN` may be the job id (best effort)."""
    try:
        write_text(state_dir() / JOBS_INDEX_DIRNAME / str(job_id), str(export_path) + "\n")
    except OSError:
        pass


def has_record(export_path: Path) -> bool:
    return (export_path / RUN_DIRNAME / RUN_FILE).is_file()


def run_folder(path: Path) -> Path | None:
    """The export path for a path that is one (or its beam_run/ or run.json), else None."""
    if path.is_file() and path.name == RUN_FILE and path.parent.name == RUN_DIRNAME:
        return path.parent.parent
    if path.is_dir():
        if path.name == RUN_DIRNAME and (path / RUN_FILE).is_file():
            return path.parent
        if has_record(path):
            return path
    return None


def job_ids_of(run: dict) -> set[str]:
    """Every job id a run record knows: training jobs and submitted stages."""
    ids = {str(j) for j in (run.get("train_jobs") or {})}
    for submission in run.get("submissions") or []:
        ids.update(str(e["job_id"]) for e in submission.get("stages", []) if e.get("job_id"))
    return ids


def resolve_run(target: str, exports_root_given: str | None = None) -> Path:
    """The export path of the run named by `target` (a run folder, a run name or a job id); RunNotFound if none."""
    path = Path(target).expanduser()
    found = run_folder(path)
    if found is not None:
        return found
    if path.exists():
        raise RunNotFound(f"{path} is not a run folder: it has no {RUN_DIRNAME}/{RUN_FILE} (a training job writes it "
                          "at its first attempt; pass the run's export path)")
    root = exports_root(exports_root_given)
    if target.isdigit():
        try:
            indexed = Path((state_dir() / JOBS_INDEX_DIRNAME / target).read_text().strip())
            if has_record(indexed) and target in job_ids_of(RunManifest(indexed).read()):
                return indexed
        except OSError:
            pass
        for record in sorted(root.glob(f"*/{RUN_DIRNAME}/{RUN_FILE}")):
            if target in job_ids_of(read_json(record) or {}):
                return record.parent.parent
        raise RunNotFound(f"no run knows job {target}: looked in {state_dir() / JOBS_INDEX_DIRNAME} and under {root}; "
                          "pass the run's export path")
    candidates = [root / target]
    try:
        from beam_slurm.config.load import load_config

        candidates.append(Path(load_config([f"run_name={target}"], validate=False).paths.export_path))
    except Exception:  # a broken environment must not hide the other candidates
        pass
    for candidate in candidates:
        if has_record(candidate):
            return candidate
    raise RunNotFound(f"no run named {target!r}: looked for {RUN_DIRNAME}/{RUN_FILE} under "
                      f"{', '.join(str(c) for c in candidates)}; pass the run's export folder or a job id")


# --- reading the training jobs --------------------------------------------------------------------------------------

def train_jobs(run: dict) -> list[dict]:
    """The run's training jobs as the jobs recorded them, oldest first."""
    return [j for j in (run.get("train_jobs") or {}).values() if isinstance(j, dict)]


def latest_train_job(run: dict) -> dict | None:
    jobs = train_jobs(run)
    return jobs[-1] if jobs else None


def bad_node_names(run: dict, job_id: str | None = None) -> list[str]:
    """The run's bad nodes; with `job_id`, only those found by that job's attempts."""
    return sorted({str(b["node"]) for b in run.get("bad_nodes") or []
                   if b.get("node") and (job_id is None or str(b.get("job_id")) == str(job_id))})


def wanted_for(run: dict, job_id: str) -> dict | None:
    """The operator's wanted outcome for this job, when not handled yet."""
    wanted = run.get("wanted")
    if isinstance(wanted, dict) and str(wanted.get("job_id")) == str(job_id) and wanted.get("handled_by_attempt") is None:
        return wanted
    return None


def resumable(run: dict) -> dict | None:
    """The latest training job when it ended stopped or failed resumable (`submit` then resumes), else None."""
    job = latest_train_job(run)
    if job and job.get("resumable") and job.get("outcome") in ("stopped", "failed"):
        return job
    return None


# --- written by the training job ----------------------------------------------------------------------------------

def begin_attempt(manifest: RunManifest, *, job_id: str, attempt: int, nodes: list[str], checkpoint: int | None,
                  run_info: dict, partition: str, nodes_needed: int, user_exclude: list[str]) -> dict:
    """Record an attempt's start; a copy of the job's entry and the run's bad nodes as they stand now.

    The run's top-level fields (name, recipe, paths) are filled in when the job was started without `submit`. An
    earlier attempt of this job that never recorded its end (its batch host died, or it was killed at once) is
    closed as 'lost'; it counts against progress when it left no newer checkpoint."""

    def change(run: dict) -> dict:
        for key, value in run_info.items():
            run.setdefault(key, value)
        jobs = run.setdefault("train_jobs", {})
        submitted = str(job_id) in job_ids_of({"submissions": run.get("submissions") or []})
        job = jobs.setdefault(str(job_id), {"job_id": str(job_id),
                                            "started_by": "beam-slurm submit" if submitted else "sbatch",
                                            "partition": partition, "nodes_needed": nodes_needed,
                                            "user_exclude": list(user_exclude), "excluded_nodes": [],
                                            "attempts": [], "outcome": None})
        for earlier in job["attempts"]:
            if earlier.get("end") is None and earlier.get("attempt") != attempt:
                earlier.update(end=now(), end_kind="lost", decision="requeued by Slurm",
                               end_reason="ended without a word from the batch shell (its node was lost, or Slurm "
                                          "killed it at once)",
                               counts_against_progress=checkpoint is None or checkpoint == earlier.get(
                                   "checkpoint_at_start"),
                               checkpoint_at_end=checkpoint)
        job["attempts"] = [a for a in job["attempts"] if a.get("attempt") != attempt]
        job["attempts"].append({"attempt": attempt, "start": now(), "start_time": time.time(), "nodes": list(nodes),
                                "checkpoint_at_start": checkpoint, "end": None})
        job["outcome"] = None
        return {"job": dict(job, attempts=[dict(a) for a in job["attempts"]]), "bad_nodes": bad_node_names(run, job_id)}

    return manifest.update(change)


def end_attempt(manifest: RunManifest, *, job_id: str, attempt: int, end: dict, bad_nodes: list[tuple[str, str]],
                outcome: str | None, outcome_reason: str, resumable_end: bool, wanted_handled: bool) -> None:
    """Record how an attempt ended (`end`: end_kind, end_reason, saved_step, checkpoint_at_end, ...), the bad nodes it
    found ((node, reason) pairs), and the job's outcome when it ends here."""

    def change(run: dict) -> None:
        job = run.setdefault("train_jobs", {}).setdefault(str(job_id), {"job_id": str(job_id), "attempts": []})
        entry = next((a for a in job["attempts"] if a.get("attempt") == attempt), None)
        if entry is None:
            entry = {"attempt": attempt}
            job["attempts"].append(entry)
        entry.update(end=now(), end_time=time.time(), **end)
        listed = set(bad_node_names(run, job_id))
        for node, reason in bad_nodes:
            if node not in listed:
                run.setdefault("bad_nodes", []).append({"node": node, "reason": reason, "job_id": str(job_id),
                                                        "attempt": attempt, "time": now()})
        if outcome:
            job.update(outcome=outcome, outcome_reason=outcome_reason, resumable=resumable_end)
        if wanted_handled and wanted_for(run, job_id):
            run["wanted"]["handled_by_attempt"] = attempt
            run["wanted"]["handled_at"] = now()

    manifest.update(change)


def set_excluded(manifest: RunManifest, job_id: str, nodes: list[str]) -> None:
    def change(run: dict) -> None:
        run.setdefault("train_jobs", {}).setdefault(str(job_id), {"job_id": str(job_id), "attempts": []})[
            "excluded_nodes"] = list(nodes)

    manifest.update(change)


# --- written by the operator verbs --------------------------------------------------------------------------------

def set_wanted(manifest: RunManifest, *, job_id: str, action: str, timeout_s: float) -> dict:
    """Write the operator's wanted outcome for the job (it replaces an earlier unhandled one)."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = str(os.getuid())
    wanted = {"action": action, "job_id": str(job_id), "requested_at": now(), "requested_time": time.time(),
              "by": user, "timeout_s": float(timeout_s), "handled_by_attempt": None}

    def change(run: dict) -> dict:
        run["wanted"] = wanted
        return wanted

    return manifest.update(change)
