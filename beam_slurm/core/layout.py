"""Every on-disk name beam-slurm reads or writes, in one place.

A run's export path (paths.export_path):

    beam_run/                   the run folder: run.json (and its lock), config.yaml, commands.sh,
                                evals/global_step_N.json (the evaluation job of a checkpoint)
    beam_evals/global_step_N/   our evaluation of the checkpoint of step N (beam_slurm.jobs.evaluation.results)
    global_step_N[/policy]/     SkyRL's HF export of step N
    logs/<job>-<attempt>/       one attempt's logs

A run's checkpoint path holds `global_step_N/` folders and SkyRL's marker `latest_ckpt_global_step.txt`, written
last after a complete save. Sweeps live under `<exports root>/beam_sweeps/<name>/` with their `sweep.json`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

RUN_DIRNAME = "beam_run"
RUN_FILE = "run.json"
RUN_LOCK_FILE = "run.json.lock"
CONFIG_FILE = "config.yaml"
COMMANDS_FILE = "commands.sh"
RUN_EVALS_DIRNAME = "evals"  # one file per checkpoint's evaluation job
SWEEP_FILE = "sweep.json"
SWEEPS_DIRNAME = "beam_sweeps"
LAST_POINTER = "last"  # the latest submission's run or sweep folder
JOBS_INDEX_DIRNAME = "jobs"  # training job id -> export path

EVALS_DIRNAME = "beam_evals"  # one folder per evaluated checkpoint
CHECKPOINT_MARKER = "latest_ckpt_global_step.txt"  # the latest complete step
STEP_DIR = re.compile(r"^global_step_(\d+)$")
POLICY_SUBDIR = "policy"  # the model sits one level below the step folder
IN_JOB_ATTEMPT_ENV = "BEAM_IN_JOB_ATTEMPT"
"""The in-job attempt of the allocation (0: its first Ray step; 1, 2, ...: restarted in the same allocation)."""


def attempt_label(restarts: int | str, in_job: int | str = 0) -> str:
    """`2`, or `2.1` for the first in-allocation restart of the job's third start; folders are `<job>-<label>`."""
    return f"{restarts}" if str(in_job) in ("", "0") else f"{restarts}.{in_job}"


def environ_attempt_label(environ: Mapping[str, str]) -> str:
    """The label of the attempt a process of the job runs in (SLURM_RESTART_COUNT and BEAM_IN_JOB_ATTEMPT)."""
    return attempt_label(environ.get("SLURM_RESTART_COUNT") or "0", environ.get(IN_JOB_ATTEMPT_ENV) or "0")


def step_dirname(step: int) -> str:
    return f"global_step_{int(step)}"


def run_dir(export_path: str | os.PathLike[str]) -> Path:
    return Path(export_path) / RUN_DIRNAME


def run_file(export_path: str | os.PathLike[str]) -> Path:
    return run_dir(export_path) / RUN_FILE


def evaluation_dir(export_path: str | os.PathLike[str], step: int) -> Path:
    return Path(export_path) / EVALS_DIRNAME / step_dirname(step)


def latest_checkpoint_step(ckpt_path: str | os.PathLike[str]) -> int | None:
    """The step in SkyRL's marker under `ckpt_path`, or None when there is none or it holds no step number."""
    try:
        text = (Path(ckpt_path) / CHECKPOINT_MARKER).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Per-user folder remembering the latest submission and the job index ($XDG_STATE_HOME/beam-slurm)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_STATE_HOME") or os.path.join(environ.get("HOME", str(Path.home())), ".local", "state")
    return Path(base) / "beam-slurm"


ATTEMPT_DIR_ENV = "BEAM_ATTEMPT_DIR"


def attempt_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    value = (os.environ if environ is None else environ).get(ATTEMPT_DIR_ENV, "")
    return Path(value) if value else None
