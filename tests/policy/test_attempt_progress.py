"""How far one attempt gets inside its time limit (notice_budget.attempt_progress), with the four recipes' numbers,
and `submit` refusing a run whose attempts cannot reach a checkpoint."""
from __future__ import annotations

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.policy.notice_budget import attempt_progress, plan_rows
from beam_slurm.verbs.submit import stalled_attempt_problems

PATHS = ["paths.model_path=/m", "paths.data_dir=/d", "paths.skyrl_dir=/s"]


def load(*keys: str):
    return load_config([*PATHS, *keys], validate=False)


@pytest.mark.parametrize("recipe", ["lora_16gpu", "lora_32gpu", "bf16_64gpu", "mxfp8_64gpu"])
def test_a_run_that_fits_one_attempt_is_never_flagged(recipe):
    progress = attempt_progress(load(f"recipe={recipe}"))
    assert progress.finishes_in_one and not progress.stalls
    assert any(r[1] == "one attempt" and "fit in one attempt" in r[2] for r in plan_rows(load(f"recipe={recipe}")))
    assert stalled_attempt_problems(load(f"recipe={recipe}")) == []


def test_thirty_minutes_of_bf16_cannot_reach_a_checkpoint_and_no_lead_longer_than_the_limit_is_proposed():
    cfg = load("recipe=bf16_64gpu", "cluster.time_limit=30:00", "trainer.expected_step_s=900",
               "checkpoint.interval=25")
    progress = attempt_progress(cfg)
    assert progress.limit_s == 1800 and progress.steps == 0 and progress.stalls
    rows = {item: value for _, item, value in plan_rows(cfg) if item in ("one attempt", "time-limit notice")}
    assert "AN ATTEMPT CANNOT REACH A CHECKPOINT" in rows["one attempt"] and "30 min limit" in rows["one attempt"]
    fixes = " ".join(value for _, item, value in plan_rows(cfg) if item == "  fix")
    assert "cluster.time_limit >=" in fixes and "no lead fits" in fixes and "signal_before_s=1850" not in fixes
    (problem,) = stalled_attempt_problems(cfg)
    assert problem.key == "cluster.time_limit" and "cluster.allow_no_checkpoint=true" in str(problem)
    assert stalled_attempt_problems(load("recipe=bf16_64gpu", "cluster.time_limit=30:00",
                                         "trainer.expected_step_s=900", "cluster.allow_no_checkpoint=true")) == []


def test_steps_per_attempt_count_the_start_the_saves_and_the_notice_lead():
    cfg = load("recipe=lora_16gpu", "cluster.time_limit=4:00:00", "max_training_steps=1000",
               "trainer.expected_step_s=600", "trainer.expected_bringup_s=180", "trainer.expected_model_load_s=600",
               "checkpoint.interval=10", "checkpoint.gbytes_per_node=62")
    progress = attempt_progress(cfg)
    # 14,400 s - 780 s start - 300 s lead = 13,320 s; a cycle is 10 steps + one save (62 s at 1 GB/s)
    assert progress.save_s == pytest.approx(62.0)
    assert progress.steps == 2 * 10 + (13320 - 2 * 6062) // 600
    assert progress.reaches_checkpoint and not progress.finishes_in_one and not progress.stalls
    assert attempt_progress(load("recipe=lora_16gpu", "cluster.time_limit=UNLIMITED")).rows()[0][2].startswith(
        "no time limit")


def test_a_save_on_notice_is_progress_even_before_the_first_checkpoint():
    cfg = load("recipe=lora_16gpu", "cluster.time_limit=1:00:00", "max_training_steps=1000",
               "trainer.expected_step_s=120", "cluster.signal_before_s=600", "cluster.grace_s=400",
               "checkpoint.interval=100")
    progress = attempt_progress(cfg)
    assert not progress.reaches_checkpoint and progress.notice_save_fits and not progress.stalls
