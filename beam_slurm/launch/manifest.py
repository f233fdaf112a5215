"""What `submit` keeps in the run folder (each submission and its stages in the run record, the resolved recipe, the
sbatch commands) and the per-user pointer to the latest submission, for bare `status`."""

from __future__ import annotations

import contextlib
import os

from beam_slurm.config.schema import BeamConfig
from beam_slurm.core import layout
from beam_slurm.core.atomic_files import write_text
from beam_slurm.core.run_record import RunRecord, StageEntry, Submission
from beam_slurm.core.run_store import RunStore, now
from beam_slurm.launch.stages import StagePlan


def record_submission(
    store: RunStore,
    cfg: BeamConfig,
    *,
    overrides: list[str],
    data_overrides: list[str],
    plans: list[StagePlan],
    dependency_type: str,
    sweep_dir: str | None,
    config_yaml: str,
) -> None:
    """Append one submission (its stages) to the record and rewrite config.yaml and commands.sh."""

    def change(run: RunRecord) -> None:
        assert cfg.run_name is not None  # fill_defaults names every run
        run.run_name, run.recipe = cfg.run_name, cfg.recipe
        run.export_path, run.ckpt_path = str(cfg.paths.export_path), str(cfg.paths.ckpt_path)
        run.log_dir, run.max_training_steps = str(cfg.paths.log_dir), cfg.max_training_steps
        run.overrides, run.data_overrides, run.sweep_dir = list(overrides), list(data_overrides), sweep_dir
        run.submissions.append(
            Submission(
                submitted_at=now(),
                dependency_type=dependency_type,
                stages=[StageEntry(**plan.to_json()) for plan in plans],
            )
        )

    store.update(change)
    store.write_config(config_yaml)
    commands = ["#!/bin/bash", f"# sbatch commands of the latest submission of {cfg.run_name} ({now()})"]
    for plan in plans:
        if plan.request is not None and plan.status == "submitted":
            commands += [f"# {plan.stage}: job {plan.job_id}", plan.request.shell()]
        else:
            commands.append(f"# {plan.stage}: {plan.status} ({plan.skip_reason or plan.job_id})")
    store.write_commands(commands)


def latest_stages(run: RunRecord) -> list[StageEntry]:
    """For each stage, in chain order, its entry in the newest submission that included it."""
    newest = {entry.stage: entry for submission in run.submissions for entry in submission.stages}
    order = {"data": 0, "container": 1, "train": 2}
    return sorted(newest.values(), key=lambda e: order.get(e.stage, 9))


def remember_last(target: str | os.PathLike) -> None:
    """Point `status` without an argument at this run or sweep folder (best effort: a read-only home is fine)."""
    with contextlib.suppress(OSError):
        write_text(layout.state_dir() / layout.LAST_POINTER, str(target) + "\n")


def last_target() -> str | None:
    try:
        return (layout.state_dir() / layout.LAST_POINTER).read_text().strip() or None
    except OSError:
        return None
