"""What `doctor --probe`'s measurements mean (beam_slurm.policy.site_probe), on fixed numbers: the notice settings
they call for, each check's verdict, and the keys a site profile keeps."""

from __future__ import annotations

import dataclasses
import math

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.policy import site_probe as sp
from beam_slurm.policy.notice_budget import Budget

PATHS = ["paths.model_path=/shared/models/beam", "paths.data_dir=/shared/data", "paths.skyrl_dir=/shared/SkyRL",
         "paths.ckpt_path=/lus/ckpt/run", "paths.export_path=/lus/exports/run"]
# 100 GB per node to save, 60 s steps: at 1 GB/s step + save + stop Ray 45 s + logs 30 s = 235 s, inside the
# recipe's 300 s lead and 180 s wait.
SMALL = ["recipe=lora_16gpu", "checkpoint.gbytes_per_node=100", "trainer.expected_step_s=60"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("MODEL_PATH", "DATA_DIR", "CKPT_PATH", "EXPORT_PATH", "SKYRL_DIR", "RUN_NAME", "BEAM_LOG_DIR",
                "BEAM_TRAINER_BACKEND", "OPTIMIZER_STATE_DISK_DIR", "BEAM_SLURM_CLUSTER", "SBATCH_PARTITION",
                "SBATCH_TIMELIMIT", "SBATCH_QOS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/home/alice")


def recipe(*extra: str):
    return load_config([*SMALL, *PATHS, *extra], validate=False)


def found(**changes) -> sp.ProbeFindings:
    """Findings of a probe that measured everything, healthy, with `changes`."""
    healthy = sp.ProbeFindings(
        signal_asked_s=30, signal_lead_s=52.0, signal_early_s=22.0, requeue_hold_s=11.0,
        shared_write_gbytes_per_s=1.0, local_write_gbytes_per_s=2.0, queue_wait_s=1.5, partition="gpu",
        measured_at="2026-12-05T23:13:28+00:00", requeue_restart_s=16.0, signal_arrived=True,
        write_bytes=256 * 2**20, shared_write_dir="/lus/ckpt", local_write_dir="/tmp",
    )
    return dataclasses.replace(healthy, **changes)


@pytest.mark.parametrize("written, seconds, expected", [
    (2 * 10**9, 1.0, 2.0),
    (256 * 2**20, 0.5, 0.536870912),
    (0, 1.0, None),
    (10**9, 0.0, None),
])
def test_write_speed_is_decimal_gigabytes_per_second(written, seconds, expected):
    assert sp.write_gbytes_per_s(written, seconds) == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("early, late", [
    (None, 0),  # not measured
    (22.0, 0),  # early: harmless for the budget
    (0.0, 0),
    (-1.5, 0),  # end times are whole seconds
    (-2.5, 3),
    (-10.0, 10),
])
def test_only_a_signal_later_than_the_tolerance_counts_as_late(early, late):
    assert sp.late_s(early) == late


def budget(save_s: float, lead_s: float = 300, grace_s: float = 180) -> Budget:
    return Budget(lead_s=lead_s, step_s=60, save_s=save_s, stop_s=45, log_copy_s=30, grace_s=grace_s)


@pytest.mark.parametrize("case, save_s, late, limit_s, lead, grace, fits", [
    ("fits as it is: the recipe's values stay", 100, 0, 86400, 300, 180, True),
    ("a slower save: the wait covers step + save, the lead everything", 200, 0, 86400, 335, 260, True),
    ("much slower: the lead keeps grace + stop_grace inside it", 1000, 0, 86400, 1135, 1060, True),
    ("a late signal adds its lateness to the lead only", 200, 10, 86400, 345, 260, True),
    ("no time limit", 200, 0, None, 335, 260, True),
    ("no lead fits a 5 min limit", 200, 0, 300, 335, 260, False),
    ("no storage at all", math.inf, 0, 86400, 300, 180, False),
])
def test_notice_advice(case, save_s, late, limit_s, lead, grace, fits):
    advice = sp.advise_notice(budget(save_s), stop_grace_s=45, late_by_s=late, limit_s=limit_s)
    assert (advice.signal_before_s, advice.grace_s, advice.fits_limit) == (lead, grace, fits), case


def test_the_advice_never_goes_below_the_recipe():
    advice = sp.advise_notice(budget(10, lead_s=900, grace_s=600), stop_grace_s=45, late_by_s=0, limit_s=86400)
    assert (advice.signal_before_s, advice.grace_s) == (900, 600)


def test_the_advised_wait_and_lead_pass_validation():
    # grace_s < signal_before_s - stop_grace_s, as beam_slurm.config.validation asks.
    for save_s in (0, 50, 115, 200, 999):
        advice = sp.advise_notice(budget(save_s), stop_grace_s=45, late_by_s=0, limit_s=None)
        assert 0 < advice.grace_s < advice.signal_before_s - 45


def verdicts(findings: sp.ProbeFindings, cfg=None) -> dict[str, str]:
    return {row["name"]: row["verdict"] for row in findings.checks(cfg)}


@pytest.mark.parametrize("case, changes, name, verdict, words", [
    ("healthy", {}, "signal_lead_measured", "ok", "22 s earlier than asked"),
    ("late", {"signal_lead_s": 20.0, "signal_early_s": -10.0}, "signal_lead_measured", "degraded",
     "raise cluster.signal_before_s by 10 s"),
    ("earlier than Slurm documents", {"signal_lead_s": 100.0, "signal_early_s": 70.0}, "signal_lead_measured",
     "degraded", "more than the 60 s Slurm documents"),
    ("never came", {"signal_lead_s": None, "signal_early_s": None, "signal_arrived": False,
                    "problems": ("signal_lead_measured: job 5 reached its time limit without USR1",)},
     "signal_lead_measured", "broken", "job 5 reached its time limit without USR1"),
    ("not measured", {"signal_lead_s": None, "signal_early_s": None, "signal_arrived": None,
                      "problems": ("signal_lead_measured: job 5 was still PENDING (Resources) when the probe's time "
                                   "ran out",)},
     "signal_lead_measured", "degraded", "PENDING (Resources)"),
    ("default hold", {"requeue_hold_s": 121.0}, "requeue_hold_measured", "ok", "121 s after its requeue"),
    ("long hold", {"requeue_hold_s": 600.0}, "requeue_hold_measured", "degraded", "cred_expire"),
    ("requeue refused", {"requeue_hold_s": None, "requeue_refused": True,
                         "problems": ("requeue_hold_measured: Requested operation is presently disabled",)},
     "requeue_hold_measured", "broken", "presently disabled"),
    ("hold not measured", {"requeue_hold_s": None}, "requeue_hold_measured", "degraded", "not measured"),
    ("shared storage unwritable", {"shared_write_gbytes_per_s": None, "shared_write_failed": True,
                                   "problems": ("shared_write_speed: cannot write in /lus/ckpt: Permission denied",)},
     "shared_write_speed", "broken", "Permission denied"),
    ("slow local disk", {"local_write_gbytes_per_s": 0.1}, "local_write_speed", "degraded", "NVMe"),
    ("local disk unwritable", {"local_write_gbytes_per_s": None, "local_write_failed": True,
                               "problems": ("local_write_speed: cannot write in /scratch/x: Permission denied",)},
     "local_write_speed", "broken", "/scratch/x"),
    ("busy queue", {"queue_wait_s": 1800.0}, "queue_wait", "degraded", "busy now"),
    ("quiet queue", {}, "queue_wait", "ok", "started 2 s after its submission"),
])
def test_check_verdicts(case, changes, name, verdict, words):
    rows = {row["name"]: row for row in found(**changes).checks()}
    assert list(rows) == list(sp.CHECK_NAMES)
    row = rows[name]
    assert set(row) == {"name", "value", "verdict", "meaning", "fix"}
    assert row["verdict"] == verdict, (case, row)
    assert words in row["meaning"] + " " + row["fix"], (case, row)
    assert (row["fix"] == "") == (verdict == "ok"), (case, row)


@pytest.mark.parametrize("case, speed, extra, verdict, words", [
    ("fits the recipe's notice", 1.0, (), "ok", "fits the recipe's notice"),
    ("needs a longer notice", 0.5, (), "degraded", "cluster.signal_before_s=335 cluster.grace_s=260"),
    ("no lead inside the limit", 0.5, ("cluster.time_limit=00:05:00",), "degraded", "raise cluster.time_limit"),
])
def test_the_write_speed_is_judged_by_the_recipe_notice(case, speed, extra, verdict, words):
    row = next(r for r in found(shared_write_gbytes_per_s=speed).checks(recipe(*extra)) if
               r["name"] == "shared_write_speed")
    assert row["verdict"] == verdict and words in row["meaning"] + " " + row["fix"], (case, row)


def test_profile_values_keep_the_measurements_and_the_notice_they_call_for():
    values = found(shared_write_gbytes_per_s=0.51234, signal_lead_s=20.0, signal_early_s=-10.0).profile_values(
        recipe())
    # save 100 GB at 0.512 GB/s = 195.2 s; grace 60 + 195.2 -> 256; lead 256 + 45 + 30 + 10 late -> 341.
    assert values == {
        "cluster.partition": "gpu",
        "cluster.storage_write_gbytes_per_s": 0.512,
        "cluster.signal_before_s": 341,
        "cluster.grace_s": 256,
        "site.signal_early_s": -10.0,
        "site.requeue_hold_s": 11.0,
        "site.local_write_gbytes_per_s": 2.0,
        "site.queue_wait_s": 1.5,
        "site.measured": ["cluster.storage_write_gbytes_per_s", "cluster.signal_before_s", "cluster.grace_s",
                          "site.signal_early_s", "site.requeue_hold_s", "site.local_write_gbytes_per_s",
                          "site.queue_wait_s"],
        "site.measured_at": "2026-12-05T23:13:28+00:00",
    }


def test_profile_values_leave_out_what_was_not_measured_and_a_lead_past_the_limit():
    missing = found(shared_write_gbytes_per_s=None, requeue_hold_s=None, queue_wait_s=None)
    values = missing.profile_values(recipe())
    assert values["site.measured"] == ["site.signal_early_s", "site.local_write_gbytes_per_s"]
    assert "cluster.signal_before_s" not in values and "cluster.storage_write_gbytes_per_s" not in values
    # A measured speed whose save no lead inside the limit fits: the speed is kept, the notice keys are not.
    tight = found(shared_write_gbytes_per_s=0.5).profile_values(recipe("cluster.time_limit=00:05:00"))
    assert tight["cluster.storage_write_gbytes_per_s"] == 0.5
    assert "cluster.signal_before_s" not in tight and "cluster.grace_s" not in tight


def test_a_profile_never_lowers_the_recipe_notice():
    values = found(shared_write_gbytes_per_s=50.0).profile_values(
        recipe("cluster.signal_before_s=900", "cluster.grace_s=600"))
    assert (values["cluster.signal_before_s"], values["cluster.grace_s"]) == (900, 600)
