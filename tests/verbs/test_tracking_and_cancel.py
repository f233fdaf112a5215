"""W&B project, group and tags as recipe keys (to SkyRL's trainer.project_name/trainer.tags, the group through
WANDB_RUN_GROUP), a sweep's shared group, and `beam-slurm cancel`'s refusals and record (the cancel of real jobs:
test_cancel_sandbox)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from beam_slurm.cli import main as beam_slurm
from beam_slurm.config.load import load_config
from beam_slurm.config.skyrl_command import skyrl_env, skyrl_overrides
from beam_slurm.core.run_record import Cancel, RunRecord, read_record, to_json
from beam_slurm.jobs.training.tracking import job_env

REPO_ROOT = Path(__file__).resolve().parents[2]
PATHS = ["paths.model_path=/m", "paths.data_dir=/d", "paths.skyrl_dir=/s", "cluster.check_paths_on_submit=false"]


def test_project_group_and_tags_reach_skyrl_and_the_job(tmp_path):
    cfg = load_config([*PATHS, "trainer.logger=wandb", "trainer.project_name=beam-math", "trainer.wandb_group=g1",
                       "trainer.tags=[lora,aime]", f"paths.export_path={tmp_path}"], validate=True)
    overrides = skyrl_overrides(cfg)
    assert "trainer.project_name=beam-math" in overrides and 'trainer.tags=["lora","aime"]' in overrides
    env = skyrl_env(cfg)
    assert (env["WANDB_PROJECT"], env["WANDB_RUN_GROUP"], env["WANDB_TAGS"]) == ("beam-math", "g1", "lora,aime")
    assert job_env(cfg, {"SLURM_JOB_ID": "5"})["WANDB_MODE"] == "offline"
    plain = load_config(PATHS, validate=True)
    assert "WANDB_RUN_GROUP" not in skyrl_env(plain) and not any(o.startswith("trainer.tags=") for o in
                                                                 skyrl_overrides(plain))


def test_bad_tracking_settings_exit_2_naming_the_key(capsys):
    assert beam_slurm(["plan", *PATHS, "trainer.tags=[a,'b,c']"]) == 2
    err = capsys.readouterr().err
    assert "trainer.tags" in err and "without a comma" in err, err
    assert beam_slurm(["plan", *PATHS, "trainer.project_name="]) == 2
    assert "trainer.project_name" in capsys.readouterr().err


def test_a_group_given_for_a_sweep_is_kept(run_env, capsys):
    import json

    _, data = run_env
    assert beam_slurm(["submit", "-m", "--dry-run", "--json", "trainer.backend=rehearsal", "lora.rank=16,64",
                       "trainer.wandb_group=mine", *data]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["wandb_group"] for r in runs] == ["mine", "mine"]
    assert all("trainer.wandb_group=mine" in s["command"] and s["command"].count("trainer.wandb_group=") == 1
               for r in runs for s in r["stages"] if s["stage"] == "train")


def test_cancel_without_a_terminal_needs_yes(run_env):
    root, _ = run_env
    proc = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "cancel", str(root / "nowhere")], cwd=REPO_ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "beam-slurm cancel: " in proc.stderr and "nowhere" in proc.stderr, proc.stderr
    export = root / "home" / "exports" / "r"
    store_dir = export / "beam_run"
    store_dir.mkdir(parents=True)
    (store_dir / "run.json").write_text('{"run_name": "r"}')
    proc = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "cancel", str(export)], cwd=REPO_ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "pass --yes" in proc.stderr, proc.stderr


def test_a_cancel_is_recorded_and_ends_the_training_job_for_good():
    record = RunRecord()
    record.begin_attempt(job_id="9", attempt=0, nodes=["n1"], checkpoint=None, when="t0", partition="p",
                         nodes_needed=1, user_exclude=[])
    record.record_cancel(Cancel(requested_at="t1", by="me", job_ids=["8", "9"], states={"8": "PENDING", "9": "RUNNING"}))
    again = read_record(to_json(record))
    assert again.cancels[0].job_ids == ["8", "9"] and again.cancels[0].states["9"] == "RUNNING"
    job = again.train_jobs["9"]
    assert job.outcome == "cancelled" and not job.resumable and "beam-slurm cancel" in job.outcome_reason
    assert again.resumable_job() is None
