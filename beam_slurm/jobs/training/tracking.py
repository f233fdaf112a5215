"""Experiment tracking across requeues: one W&B run for the whole run, whatever the number of attempts.

W&B ignores `resume` offline, so the training job chooses one W&B run id at the run's first attempt and keeps it in
the run record; every attempt's trainer gets that WANDB_RUN_ID and its own WANDB_DIR, `beam_run/wandb/<job>-<attempt>/`
under the export path, which `beam-slurm sync RUN` uploads into the one run.
"""

from __future__ import annotations

import os
import secrets
import string
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beam_slurm.core.layout import RUN_DIRNAME
from beam_slurm.core.run_record import RunRecord, Tracking
from beam_slurm.core.run_store import RunStore, now

if TYPE_CHECKING:  # the rehearsal imports this module and loads the schema only when started by hand
    from beam_slurm.config.schema import BeamConfig

# Imported inside the functions that use it, on purpose: wandb (only a run with trainer.logger=wandb opens a W&B run).

WANDB_FOLDER = "wandb"  # under `beam_run/`, one WANDB_DIR per attempt (`<jobid>-<attempt>`)
_ID_ALPHABET = string.ascii_lowercase + string.digits


def ensure_run_id(export_path: str | os.PathLike, job_id: str) -> str:
    """The run's W&B id from the run record, chosen and recorded now when this is the run's first attempt."""

    def change(run: RunRecord) -> str:
        if run.tracking is None or not run.tracking.wandb_run_id:
            run_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))  # W&B-style: 8 letters and digits
            run.tracking = Tracking(logger="wandb", wandb_run_id=run_id, chosen_by_job=str(job_id), chosen_at=now())
        assert run.tracking.wandb_run_id is not None  # recorded, or chosen just above
        return run.tracking.wandb_run_id

    return RunStore(export_path).update(change)


def attempt_dir(export_path: str | os.PathLike, job_id: str, attempt: int) -> Path:
    return Path(export_path) / RUN_DIRNAME / WANDB_FOLDER / f"{job_id}-{attempt}"


def job_env(cfg: BeamConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The per-attempt W&B environment for the trainer (inside the allocation); {} unless trainer.logger=wandb."""
    if cfg.trainer.logger != "wandb":
        return {}
    assert cfg.paths.export_path is not None  # load_config fills it when the recipe leaves it unset
    job_id = environ.get("SLURM_JOB_ID", "local")
    attempt = int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
    folder = attempt_dir(cfg.paths.export_path, job_id, attempt)
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "WANDB_RUN_ID": ensure_run_id(cfg.paths.export_path, job_id),
        "WANDB_RESUME": "allow",
        "WANDB_MODE": cfg.trainer.wandb_mode,
        "WANDB_DIR": str(folder),
    }


def open_run(environ: Mapping[str, str], name: str, config: dict | None = None) -> Any:
    """wandb.init as SkyRL's W&B logger calls it, when the job set WANDB_RUN_ID (trainer.logger=wandb); else None."""
    if not environ.get("WANDB_RUN_ID"):
        return None
    import wandb

    return wandb.init(project=environ.get("WANDB_PROJECT", "beam"), name=name, config=config or {})


def log(run: Any, metrics: dict, step: int) -> None:
    if run is not None:
        run.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)
