"""Runs: the one resolver from what a user types to runs, and the operator's wanted outcome.

Every run has a record (`submit` and each training attempt write it), so a plain `sbatch` job is a run too.
`resolve_runs`: a sweep folder gives its runs, anything else one via `resolve_run`: a run folder, a run name (under
`--exports-root`, $BEAM_EXPORTS_ROOT, else $HOME/exports) or a job id (the per-user job index, the exports root's runs,
then what Slurm says the job wrote).
"""

from __future__ import annotations

import getpass
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from beam_slurm.config.load import load_config
from beam_slurm.core import layout
from beam_slurm.core.atomic_files import read_json
from beam_slurm.core.errors import UserError
from beam_slurm.core.run_record import RunRecord, Wanted, read_record
from beam_slurm.core.run_store import RunStore, now
from beam_slurm.slurm import scheduler

EXPORTS_ROOT_ENV = "BEAM_EXPORTS_ROOT"  # where run names are looked up


class RunNotFound(UserError, ValueError):
    """The argument names no run; the message says where we looked and what to pass instead."""


def exports_root(given: str | None = None) -> Path:
    root = given or os.environ.get(EXPORTS_ROOT_ENV) or str(Path(os.environ.get("HOME", str(Path.home()))) / "exports")
    return Path(root).expanduser()


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
    """The run knows the job: a training job, a submitted stage or an evaluation job of its checkpoints."""
    try:
        if job_id in read_record(read_json(record_file), str(record_file)).job_ids():
            return True
    except UserError:
        return False
    store = RunStore(record_file.parent.parent)
    return any(str(e.job_id).split("_")[0] == job_id for e in store.evaluations() if e.job_id)


def _run_around(job_id: str) -> Path | None:
    """The run whose folder holds what Slurm says the job wrote: for a job id that no index lists. Raises
    SlurmUnreachable when none is found and Slurm did not answer: then no one can say the job id is wrong."""
    with scheduler.noting_outages() as outages:
        folders = scheduler.job_folders(job_id)
    for where in folders:
        for folder in [Path(where), *Path(where).parents][:6]:
            if has_record(folder) and _knows_job(layout.run_file(folder), job_id):
                return folder
    if outages:
        raise outages[-1]
    return None


def resolve_run(target: str, exports_root_given: str | None = None) -> Path:
    """The export path of the run named by `target` (a run folder, a run name or a job id); RunNotFound if none."""
    path = Path(target).expanduser()
    found = run_folder(path)
    if found is not None:
        return found
    here = f"{layout.RUN_DIRNAME}/{layout.RUN_FILE}"
    if path.exists():
        raise RunNotFound(
            f"{path} is not a run folder: it has no {here} (a training job writes it at its first "
            "attempt; pass the run's export path)"
        )
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
        around = _run_around(target)
        if around is not None:
            return around
        raise RunNotFound(
            f"no run knows job {target}: looked in {index}, under {root} and where Slurm says the job "
            "wrote; pass the run's export path"
        )
    candidates = [root / target]
    try:
        export_path = load_config([f"run_name={target}"], validate=False).paths.export_path
        assert export_path is not None  # fill_defaults derives it
        candidates.append(Path(export_path))
    except Exception:  # a broken environment must not hide the other candidates
        pass
    for candidate in candidates:
        if has_record(candidate):
            return candidate
    raise RunNotFound(
        f"no run named {target!r}: looked for {here} under "
        f"{', '.join(str(c) for c in candidates)}; pass the run's export folder or a job id"
    )


@dataclass(frozen=True)
class RunTarget:
    export_path: Path
    choices: tuple[str, ...] = ()  # Its swept `key=value` when it came from a sweep folder
    sweep_dir: Path | None = None


def sweep_folder(path: Path) -> Path | None:
    """The sweep folder `path` is (or whose sweep.json it is), else None."""
    folder = path.parent if path.is_file() and path.name == layout.SWEEP_FILE else path
    return folder if (folder / layout.SWEEP_FILE).is_file() else None


def resolve_runs(target: str, exports_root_given: str | None = None) -> list[RunTarget]:
    """The runs `target` names: a sweep folder (or its sweep.json) stands for its runs; else one (`resolve_run`)."""
    sweep = sweep_folder(Path(target).expanduser())
    if sweep is not None:
        listed = (read_json(sweep / layout.SWEEP_FILE) or {}).get("runs") or []
        return [RunTarget(Path(r["export_path"]), tuple(r.get("choices") or []), sweep) for r in listed]
    return [RunTarget(resolve_run(target, exports_root_given))]


def user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return str(os.getuid())


def set_wanted(store: RunStore, *, job_id: str, action: str, timeout_s: float) -> Wanted:
    """Write the operator's wanted outcome for the job (it replaces an earlier unhandled one)."""
    wanted = Wanted(
        action=action,
        job_id=str(job_id),
        requested_at=now(),
        requested_time=time.time(),
        by=user_name(),
        timeout_s=float(timeout_s),
    )
    store.update(lambda run: setattr(run, "wanted", wanted))
    return wanted


@dataclass
class RunJob:
    """A run's training job as the verbs `attach` and `logs` find it."""

    export_path: Path
    job_id: str
    log_dir: Path
    run: RunRecord = field(default_factory=RunRecord)

    def attempt_dir(self, attempt: int | str) -> Path:
        return self.log_dir / f"{self.job_id}-{attempt}"

    def attempts(self) -> list[str]:
        """Attempts with a log folder (`2`, or `2.1` for an in-job restart), oldest first."""
        tails = [folder.name.rsplit("-", 1)[-1] for folder in self.log_dir.glob(f"{self.job_id}-*") if folder.is_dir()]
        return sorted(
            (tail for tail in tails if tail.replace(".", "", 1).isdigit()),
            key=lambda label: tuple(int(part) for part in label.split(".")),
        )


def find_job(target: str, exports_root: str | None = None) -> RunJob:
    """The training job RUN names: that job for a job id, else the run's latest one. RunNotFound when none."""
    export_path = resolve_run(target, exports_root)
    run = RunStore(export_path).read()
    job_id = target if target.isdigit() else getattr(run.latest_train_job(), "job_id", "")
    if not job_id:
        raise RunNotFound(
            f"run {run.run_name or export_path} has no training job yet (its record is written when the job starts)"
        )
    return RunJob(export_path, job_id, Path(run.log_dir or export_path / "logs"), run)
