"""One W&B run id per run, kept in the run record; the per-attempt W&B environment; what `beam-slurm sync` runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.config.skyrl_command import skyrl_env
from beam_slurm.core.errors import ConfigError
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.training import tracking
from beam_slurm.verbs import sync as sync

REQUIRED = ["recipe=lora_16gpu", "trainer.backend=rehearsal", "paths.model_path=/m", "paths.data_dir=/d"]


def config(tmp_path: Path, *keys: str):
    return load_config([*REQUIRED, f"paths.export_path={tmp_path}/export", *keys])


def test_the_run_id_is_chosen_once_and_every_attempt_gets_it_with_its_own_folder(tmp_path):
    cfg = config(tmp_path, "trainer.logger=wandb")
    first = tracking.job_env(cfg, {"SLURM_JOB_ID": "41", "SLURM_RESTART_COUNT": "0"})
    again = tracking.job_env(cfg, {"SLURM_JOB_ID": "41", "SLURM_RESTART_COUNT": "1"})
    later_job = tracking.job_env(cfg, {"SLURM_JOB_ID": "57", "SLURM_RESTART_COUNT": "0"})
    assert first["WANDB_RUN_ID"] == again["WANDB_RUN_ID"] == later_job["WANDB_RUN_ID"]
    assert first["WANDB_MODE"] == "offline" and first["WANDB_RESUME"] == "allow"
    assert first["WANDB_DIR"].endswith("/export/beam_run/wandb/41-0") and again["WANDB_DIR"].endswith("wandb/41-1")
    record = json.loads((tmp_path / "export" / "beam_run" / "run.json").read_text())
    assert record["tracking"]["wandb_run_id"] == first["WANDB_RUN_ID"] and record["tracking"]["chosen_by_job"] == "41"
    assert tracking.job_env(config(tmp_path), {"SLURM_JOB_ID": "41"}) == {}, "console logger: no W&B environment"


def test_the_launch_environment_carries_mode_and_resume_only_for_wandb(tmp_path):
    env = skyrl_env(config(tmp_path, "trainer.logger=wandb", "trainer.wandb_mode=online"))
    assert env["WANDB_MODE"] == "online" and env["WANDB_RESUME"] == "allow" and "WANDB_RUN_ID" not in env
    assert not any(k.startswith("WANDB_") for k in skyrl_env(config(tmp_path)))
    with pytest.raises(ConfigError, match="trainer.wandb_mode"):
        config(tmp_path, "trainer.logger=wandb", "trainer.wandb_mode=sometimes")


def test_sync_takes_the_attempts_in_order_and_only_this_runs_folders(tmp_path, capsys):
    export = tmp_path / "export"
    base = export / "beam_run" / "wandb"
    (export / "beam_run").mkdir(parents=True)
    run = {"train_jobs": {"900": {}, "1000": {}}, "tracking": {"wandb_run_id": "abcd1234"}}
    (export / "beam_run" / "run.json").write_text(json.dumps(run))
    for folder in ("1000-0", "900-1", "900-0", "900-10"):
        (base / folder / "wandb" / f"offline-run-2026_{folder}-abcd1234").mkdir(parents=True)
    (base / "900-0" / "wandb" / "offline-run-2026-zzzz9999").mkdir()  # another run's folder: not ours
    commands = sync.sync_commands(export, RunStore(export).read())
    assert [Path(c[-1]).parent.parent.name for c in commands] == ["900-0", "900-1", "900-10", "1000-0"]
    assert all(c[1:4] == ["sync", "--id", "abcd1234"] and c[0].endswith("/wandb") for c in commands)

    (export / "beam_run" / "run.json").write_text(json.dumps({"train_jobs": {}}))
    assert sync.main([str(export), "--dry-run"]) == 2
    assert "no W&B run id" in capsys.readouterr().err


def test_sync_is_a_verb():
    from beam_slurm.cli import VERBS, verb_module

    assert "sync" in VERBS and verb_module("sync") == "beam_slurm.verbs.sync"
