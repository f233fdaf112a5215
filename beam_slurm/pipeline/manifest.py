"""The run folder `<export_path>/beam_run/`: everything needed to see, reproduce and follow one run.

    config.yaml                 the resolved recipe (reproduce with `beam-slurm plan`/`train` from it)
    run.json                    run name, paths, overrides, and every submission: stage, job id, status, the
                                reason a stage was skipped, the rendered sbatch command, the jobs it waited for;
                                the training jobs' attempts (written by the job itself, also when it was started
                                with plain `sbatch`), the operator's wanted outcome and the bad nodes (see
                                beam_slurm.pipeline.runs)
    commands.sh                 the latest submission's sbatch commands, one per line (shell-quoted)
    evals/global_step_N.json    one file per evaluation job submitted for a checkpoint (no read-modify-write of
                                run.json from inside the training job)

Every file is written to a temporary name in the same folder and renamed into place; run.json updates hold an
exclusive lock so two submissions of the same run cannot lose each other's entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from beam_slurm.atomic_files import write_text

RUN_DIRNAME = "beam_run"
RUN_FILE = "run.json"
CONFIG_FILE = "config.yaml"
COMMANDS_FILE = "commands.sh"
EVALS_DIRNAME = "evals"
SWEEP_FILE = "sweep.json"
SWEEPS_DIRNAME = "beam_sweeps"
LAST_POINTER = "last"
T = TypeVar("T")


def read_json(path: Path) -> Any:
    """Parsed JSON, or None when the file is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class RunManifest:
    """The `beam_run/` folder of one run."""

    def __init__(self, export_path: str | os.PathLike):
        self.export_path = Path(export_path)
        self.dir = self.export_path / RUN_DIRNAME

    @property
    def run_file(self) -> Path:
        return self.dir / RUN_FILE

    def exists(self) -> bool:
        return self.run_file.is_file()

    def read(self) -> dict:
        return read_json(self.run_file) or {}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def update(self, change: Callable[[dict], T]) -> T:
        """Read run.json, let `change` edit it in place, write it back, all under the lock; `change`'s result."""
        with self._locked():
            run = self.read()
            result = change(run)
            write_text(self.run_file, json.dumps(run, indent=2) + "\n")
            return result

    def write_config(self, config_yaml: str) -> None:
        """config.yaml: the resolved recipe of the latest job or submission."""
        self.dir.mkdir(parents=True, exist_ok=True)
        write_text(self.dir / CONFIG_FILE, config_yaml)

    def record_submission(self, cfg, *, overrides: list[str], data_overrides: list[str], plans: list,
                          dependency_type: str, sweep_dir: str | None, config_yaml: str) -> None:
        """Append one submission (its stages) and rewrite config.yaml and commands.sh."""
        with self._locked():
            run = self.read()
            run.update({
                "run_name": cfg.run_name,
                "recipe": cfg.recipe,
                "export_path": str(cfg.paths.export_path),
                "ckpt_path": str(cfg.paths.ckpt_path),
                "log_dir": str(cfg.paths.log_dir),
                "max_training_steps": cfg.max_training_steps,
                "overrides": list(overrides),
                "data_overrides": list(data_overrides),
                "sweep_dir": sweep_dir,
            })
            run.setdefault("submissions", []).append({
                "submitted_at": now(),
                "dependency_type": dependency_type,
                "stages": [plan.to_json() for plan in plans],
            })
            write_text(self.dir / CONFIG_FILE, config_yaml)
            commands = ["#!/bin/bash", f"# sbatch commands of the latest submission of {cfg.run_name} ({now()})"]
            for plan in plans:
                if plan.request is not None and plan.status == "submitted":
                    commands.append(f"# {plan.stage}: job {plan.job_id}")
                    commands.append(plan.request.shell())
                else:
                    commands.append(f"# {plan.stage}: {plan.status} ({plan.skip_reason or plan.job_id})")
            write_text(self.dir / COMMANDS_FILE, "\n".join(commands) + "\n")
            write_text(self.run_file, json.dumps(run, indent=2) + "\n")

    def latest_stages(self) -> list[dict]:
        """For each stage, its entry in the newest submission that included it (a `--stages train` resubmission
        keeps showing the earlier data and container jobs), in chain order."""
        newest: dict[str, dict] = {}
        for submission in self.read().get("submissions") or []:
            for entry in submission.get("stages", []):
                newest[entry.get("stage", "")] = entry
        order = {"data": 0, "container": 1, "train": 2}
        return sorted(newest.values(), key=lambda e: order.get(e.get("stage", ""), 9))

    def all_job_ids(self, stage: str) -> list[str]:
        """Every job id this run ever had for `stage`, newest first."""
        ids = []
        for submission in reversed(self.read().get("submissions") or []):
            for entry in submission.get("stages", []):
                if entry.get("stage") == stage and entry.get("job_id"):
                    ids.append(str(entry["job_id"]))
        return ids

    def record_evaluation(self, step: int, checkpoint_dir: str, plan) -> Path:
        """Write evals/global_step_N.json for an evaluation job (a resubmission keeps the earlier job ids)."""
        path = self.dir / EVALS_DIRNAME / f"global_step_{int(step)}.json"
        earlier = read_json(path) or {}
        entry = {"step": int(step), "checkpoint": checkpoint_dir, "job_id": plan.job_id,
                 "submitted_at": now(), "command": plan.request.shell() if plan.request is not None else None,
                 "earlier_job_ids": [*earlier.get("earlier_job_ids", []), *([earlier["job_id"]] if earlier.get("job_id") else [])]}
        write_text(path, json.dumps(entry, indent=2) + "\n")
        return path

    def evaluations(self) -> list[dict]:
        """Recorded evaluation jobs, by step."""
        folder = self.dir / EVALS_DIRNAME
        entries = [read_json(p) for p in folder.glob("global_step_*.json")] if folder.is_dir() else []
        return sorted((e for e in entries if isinstance(e, dict) and "step" in e), key=lambda e: e["step"])


def state_dir(environ=None) -> Path:
    """Per-user folder remembering the latest submission, so `beam-slurm status` needs no argument."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_STATE_HOME") or os.path.join(environ.get("HOME", str(Path.home())), ".local", "state")
    return Path(base) / "beam-slurm"


def remember_last(target: str | os.PathLike) -> None:
    """Point `status` without an argument at this run or sweep folder (best effort: a read-only home is fine)."""
    try:
        write_text(state_dir() / LAST_POINTER, str(target) + "\n")
    except OSError:
        pass


def last_target() -> str | None:
    try:
        return (state_dir() / LAST_POINTER).read_text().strip() or None
    except OSError:
        return None
