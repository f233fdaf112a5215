"""The notice budget and the checkpoint-interval advice (beam_slurm.policy.notice_budget), on fixed numbers, and the lines
`plan` prints from it for the four recipes."""

from __future__ import annotations

import json
import math

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.core.errors import ConfigError
from beam_slurm.policy import notice_budget as nb
from beam_slurm.slurm.preemption import PreemptionInfo

PATHS = ["paths.model_path=/shared/models/beam", "paths.data_dir=/shared/data", "paths.skyrl_dir=/shared/SkyRL"]
RECIPES = ("lora_16gpu", "lora_32gpu", "bf16_64gpu", "mxfp8_64gpu")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("MODEL_PATH", "DATA_DIR", "CKPT_PATH", "EXPORT_PATH", "SKYRL_DIR", "RESUME_MODE", "MAX_TRAINING_STEPS",
                "CKPT_INTERVAL", "OPTIMIZER_STATE_DISK_DIR", "RUN_NAME", "BEAM_LOG_DIR", "BEAM_TRAINER_BACKEND",
                "BEAM_REHEARSAL_STEP_SECONDS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/home/alice")


def load(recipe, *extra):
    return load_config([f"recipe={recipe}", *PATHS, *extra])


def test_save_time_is_bytes_over_bandwidth():
    assert nb.save_seconds(900e9, 3.0) == pytest.approx(300.0)
    assert nb.save_seconds(0, 1.0) == 0.0
    assert nb.save_seconds(1e9, 0) == math.inf


def test_a_full_checkpoint_fits_a_300_s_lead_only_above_3_gb_per_s():
    # The seed's 0.9 TB per node, no step or stop time: 300 s of lead needs 3 GB/s.
    slow = nb.Budget(lead_s=300, step_s=0, save_s=nb.save_seconds(900e9, 2.9), stop_s=0, log_copy_s=0)
    fast = nb.Budget(lead_s=300, step_s=0, save_s=nb.save_seconds(900e9, 3.1), stop_s=0, log_copy_s=0)
    assert not slow.fits and fast.fits


def test_budget_adds_step_save_stop_and_logs():
    budget = nb.Budget(lead_s=300, step_s=60, save_s=120, stop_s=45, log_copy_s=30, grace_s=180)
    assert budget.needed_s == 255 and budget.save_window_s == 165
    assert budget.fits and budget.fixes(bytes_per_node=1e9, interval_steps=10) == []
    assert budget.summary() == "step 60 s + save 120 s + stop Ray 45 s + logs 30 s = 255 s <= lead 300 s"


def test_a_too_short_lead_names_each_fix():
    budget = nb.Budget(lead_s=300, step_s=100, save_s=300, stop_s=45, log_copy_s=30, grace_s=180)
    assert not budget.fits_lead
    fixes = budget.fixes(bytes_per_node=375e9, interval_steps=25)
    assert fixes[0] == ("a larger lead: cluster.signal_before_s=475 with #SBATCH --signal=B:USR1@475 and "
                        "cluster.grace_s=400")
    # 375 GB in the 300 - 100 - 45 - 30 = 125 s the lead leaves: 3 GB/s.
    assert fixes[1].startswith("faster storage: >= 3.0 GB/s per node")
    assert "checkpoint.interval (now 25)" in fixes[2]


def test_a_save_within_the_lead_but_past_the_jobs_grace_is_flagged():
    budget = nb.Budget(lead_s=600, step_s=100, save_s=200, stop_s=45, log_copy_s=30, grace_s=180)
    assert budget.fits_lead and not budget.fits_grace and not budget.fits
    assert budget.fixes(bytes_per_node=1e9, interval_steps=5)[0].startswith("cluster.grace_s=300")


def test_young_daly_optimum():
    # C = 100 s, M = 20000 s: sqrt(2 * 100 * 20000) - 100 = 1900 s.
    assert nb.young_daly_s(100, 20000) == pytest.approx(1900)
    assert nb.young_daly_s(0, 20000) == 0
    assert nb.young_daly_s(100, math.inf) == math.inf
    assert nb.waste_share(1900, 100, 20000) == pytest.approx(100 / 2000 + 2000 / 40000)


def test_advice_picks_the_step_count_with_the_least_waste():
    # 10 interruptions a day: M = 8640 s; C = 60 s, steps of 100 s -> optimum sqrt(2*60*8640) - 60 = 958 s ~ 9.6 steps.
    advice = nb.advise_interval(save_s=60, step_s=100, interruptions_per_day=10, configured_steps=25, max_steps=50)
    mtbf = 8640
    wastes = {k: nb.waste_share(k * 100, 60, mtbf) for k in range(1, 51)}
    assert advice.advised_steps == min(wastes, key=wastes.get) in (9, 10)
    assert advice.advised_waste == pytest.approx(wastes[advice.advised_steps])
    assert advice.configured_waste == pytest.approx(wastes[25]) and advice.configured_waste > advice.advised_waste


def test_small_saves_advise_every_step():
    advice = nb.advise_interval(save_s=2, step_s=600, interruptions_per_day=1, configured_steps=10, max_steps=50)
    assert advice.advised_steps == 1


def test_no_interruptions_without_notice_advise_the_longest_interval():
    advice = nb.advise_interval(save_s=60, step_s=100, interruptions_per_day=0, configured_steps=10, max_steps=50)
    assert advice.advised_steps == 50 and advice.optimum_s == math.inf


def test_step_time_measured_from_train_metrics(tmp_path):
    rows = [(1, 100.0, 0), (2, 160.0, 0), (3, 225.0, 0), (4, 900.0, 1), (5, 961.0, 1)]
    (tmp_path / "train_metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "time": t, "attempt": a}) + "\n" for s, t, a in rows) + "not json\n")
    # Gaps within an attempt only: 60, 65, 61 -> median 61 (the gap across the requeue is not a step).
    assert nb.measured_step_seconds(tmp_path / "train_metrics.jsonl") == 61
    assert nb.measured_step_seconds(tmp_path / "missing.jsonl") is None
    cfg = load("lora_32gpu", f"paths.export_path={tmp_path}")
    assert nb.step_seconds(cfg) == (61, "measured from train_metrics.jsonl")


def test_stop_time_measured_from_the_runs_own_stops(tmp_path):
    logs = tmp_path / "logs"
    cfg = load("lora_16gpu", f"paths.log_dir={logs}", "cluster.stop_grace_s=45", "cluster.log_copy_s=30")
    # Before the run ever stopped: the two allowances.
    assert nb.stop_seconds(cfg)[:2] == (45.0, 30.0)
    assert nb.recipe_budget(cfg).needed_s == nb.recipe_budget(cfg).step_s + nb.recipe_budget(cfg).save_s + 75
    for attempt, seconds in enumerate((12.0, 20.0, 14.0)):
        (logs / f"77-{attempt}").mkdir(parents=True)
        (logs / f"77-{attempt}" / nb.STOP_FILE).write_text(json.dumps({"seconds": seconds, "time": 1.0}))
    (logs / "77-3").mkdir()
    (logs / "77-3" / nb.STOP_FILE).write_text("cut off")  # a file that cannot be read counts for nothing
    assert nb.measured_stop_seconds(logs) == (14.0, 3)
    stop_s, log_copy_s, source = nb.stop_seconds(cfg)
    assert (stop_s, log_copy_s) == (14.0, 0.0) and "median of this run's 3 stops" in source
    budget = nb.recipe_budget(cfg)
    assert budget.needed_s == budget.step_s + budget.save_s + 14.0 and "stop Ray 14 s" in budget.summary()
    rows = {item: value for _, item, value in nb.plan_rows(cfg)}
    assert rows["stop"].startswith("stop Ray 14 s (measured: median of this run's 3 stops"), rows["stop"]


def test_recipe_sizes_and_step_estimates():
    full = load("bf16_64gpu")
    assert nb.checkpoint_bytes_per_node(full)[0] == pytest.approx(7e12 / 8)  # the seed's 0.9 TB share per node
    assert nb.step_seconds(full) == (900.0, "trainer.expected_step_s (estimate)")
    lora = load("lora_32gpu")
    assert nb.checkpoint_bytes_per_node(lora)[0] < 0.05 * nb.checkpoint_bytes_per_node(full)[0]
    given = load("lora_32gpu", "checkpoint.gbytes_per_node=12.5")
    assert nb.checkpoint_bytes_per_node(given) == (12.5e9, "checkpoint.gbytes_per_node")
    rehearsal = load("lora_16gpu", "trainer.backend=rehearsal", "trainer.rehearsal_save_s=13",
                     "trainer.rehearsal_save_bytes=2000000000", "trainer.rehearsal_step_s=1")
    assert nb.recipe_save_seconds(rehearsal) == 13  # 2 GB at 1 GB/s is 2 s; the rehearsal's save lasts 13
    assert nb.recipe_save_seconds(rehearsal, write_gbytes_per_s=0.1) == pytest.approx(20)


@pytest.mark.parametrize("recipe", RECIPES)
def test_plan_lines_for_each_recipe_with_the_defaults(recipe):
    cfg = load(recipe)
    rows = {item: value for section, item, value in nb.plan_rows(cfg) if section == "notice"}
    assert set(rows) == {"save", "step", "stop", "time-limit notice", "  fix", "one attempt", "interval advice"}
    assert rows["stop"] == ("stop Ray 45 s + copy logs 30 s (allowances: cluster.stop_grace_s + cluster.log_copy_s, "
                            "until the run has stopped once)"), rows["stop"]
    budget = nb.recipe_budget(cfg)
    # Steps of ~10 minutes alone outlast the default 300 s lead: every recipe is flagged, with the lead it needs.
    assert not budget.fits
    assert rows["time-limit notice"].startswith("DOES NOT FIT: ")
    assert f"cluster.signal_before_s={math.ceil(budget.needed_s)}" in rows["  fix"]
    advice = nb.recipe_advice(cfg)
    assert f"every {advice.advised_steps} steps" in rows["interval advice"]
    assert f"configured every {cfg.checkpoint.interval}" in rows["interval advice"]


def test_a_lead_that_covers_the_budget_is_not_flagged():
    cfg = load("lora_32gpu", "trainer.expected_step_s=120", "cluster.signal_before_s=900", "cluster.grace_s=600",
               "cluster.time_limit=24:00:00")
    line = dict((item, value) for _, item, value in nb.plan_rows(cfg))["time-limit notice"]
    assert line.endswith(": fits"), line


def preemption(**kw):
    base = dict(reachable=True, preempt_type="preempt/partition_prio", cluster_mode="REQUEUE", user_signal=True,
                kill_wait_s=10, partition="low", partition_mode="REQUEUE", partition_grace_s=20)
    return PreemptionInfo(**{**base, **kw})


def rehearsal(save_s):
    return load("lora_16gpu", "trainer.backend=rehearsal", f"trainer.rehearsal_save_s={save_s}",
                "trainer.rehearsal_step_s=1", "cluster.grace_s=30", "cluster.signal_before_s=120")


def preemption_line(cfg, info):
    rows = [(item, value) for _, item, value in nb.plan_rows(cfg, info)]
    at = [item for item, _ in rows].index("preemption")
    fix = rows[at + 1][1] if at + 1 < len(rows) and rows[at + 1][0] == "  fix" else ""
    return rows[at][1] + (f" Fix: {fix}" if fix else "")


def test_preemption_with_a_user_signal_budgets_the_grace_time():
    assert preemption_line(rehearsal(13), preemption()).endswith("step 1 s + save 13 s = 14 s <= lead 20 s: fits")
    line = preemption_line(rehearsal(30), preemption())
    assert "DOES NOT FIT: step 1 s + save 30 s = 31 s > lead 20 s" in line
    assert "GraceTime of partition low (>= 31 s" in line


def test_preemption_without_a_notice_says_what_is_lost():
    cfg = rehearsal(13)
    no_grace = preemption_line(cfg, preemption(partition_grace_s=0))
    assert "WITHOUT a notice (GraceTime 0)" in no_grace and "up to 10 (checkpoint.interval)" in no_grace
    no_signal = preemption_line(rehearsal(30), preemption(user_signal=False))
    assert "WITHOUT a notice" in no_signal and "reaches only the job's tasks" in no_signal
    assert "step 1 s + save 30 s = 31 s > lead 20 s" in no_signal and "stops at once" in no_signal
    assert "preempt_send_user_signal" in no_signal
    cancel = preemption_line(cfg, preemption(partition_mode="CANCEL"))
    assert "cancelled, not requeued" in cancel
    assert "not preemptable" in preemption_line(cfg, preemption(partition="batch", partition_mode="OFF"))
    unreachable = preemption_line(cfg, PreemptionInfo(reachable=False, why="scontrol not found on PATH"))
    assert unreachable.startswith("Slurm not reachable here (scontrol not found on PATH)")


def test_a_sigterm_to_the_tasks_is_a_notice_only_when_the_save_fits_the_grace_time():
    # Without preempt_send_user_signal the first SIGTERM reaches only the tasks: plan and the job agree on when the
    # Ray step holds it and the job saves.
    line = preemption_line(rehearsal(13), preemption(user_signal=False))
    assert "the Ray step holds it and the job saves as on a notice" in line, line
    assert line.endswith("step 1 s + save 13 s = 14 s <= lead 20 s: fits"), line
    cost = nb.SaveCost.of(rehearsal(13))
    assert (cost.step_s, cost.min_save_s, cost.job_grace_s) == (1.0, 13.0, 30.0)
    held, why = nb.term_notice(preemption(user_signal=False), None, cost)
    assert held and why == "step 1 s + save 13 s = 14 s <= GraceTime 20 s", why
    # The measured bandwidth counts: 2 GB per node at 0.1 GB/s is a 20 s save, which no longer fits.
    big = nb.SaveCost(step_s=1.0, bytes_per_node=2e9, min_save_s=0.0, write_gbytes_per_s=1.0, job_grace_s=60.0)
    assert nb.term_notice(preemption(), None, big)[0]
    held, why = nb.term_notice(preemption(), None, big, measured_gbytes_per_s=0.1)
    assert not held and why.endswith("> GraceTime 20 s: the save does not fit"), why
    # The job's own wait bounds it too, and so does every way a preemption can come without a grace time.
    short_wait = nb.SaveCost(step_s=1.0, bytes_per_node=0.0, min_save_s=13.0, write_gbytes_per_s=1.0, job_grace_s=5.0)
    assert nb.term_notice(preemption(), None, short_wait) == (
        False, "step + save > cluster.grace_s 5 s: the job would not wait for the save")
    assert nb.term_notice(preemption(partition_grace_s=0), None, cost) == (
        False, "GraceTime 0: a preemption kills at once")
    assert not nb.term_notice(preemption(partition_mode="SUSPEND"), None, cost)[0]
    assert not nb.term_notice(preemption(partition_mode="OFF"), None, cost)[0]
    assert not nb.term_notice(PreemptionInfo(reachable=False, why="timeout"), None, cost)[0]


def test_budget_settings_out_of_range_are_refused_by_name():
    with pytest.raises(ConfigError) as caught:
        load("lora_16gpu", "cluster.storage_write_gbytes_per_s=0", "cluster.interruptions_per_day=-1",
             "trainer.rehearsal_save_bytes=-5")
    keys = {p.key for p in caught.value.problems}
    assert {"cluster.storage_write_gbytes_per_s", "cluster.interruptions_per_day",
            "trainer.rehearsal_save_bytes"} <= keys


def test_plan_prints_the_budget_and_says_when_slurm_is_out_of_reach(tmp_path):
    import subprocess
    import sys

    env = {"HOME": str(tmp_path), "PATH": str(tmp_path), "COLUMNS": "400"}  # no scontrol on PATH: a laptop
    proc = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "plan", "recipe=bf16_64gpu", *PATHS,
                           "cluster.check_paths_on_submit=false", "--json"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    rows = {row["item"]: row for row in plan["rows"] if row["section"] == "notice"}
    assert rows["preemption"]["text"].startswith("Slurm not reachable here (scontrol not found on PATH")
    assert rows["time-limit notice"]["text"].startswith("DOES NOT FIT: step 900 s + save 875 s")
    assert rows["time-limit notice"] in plan["findings"] and "fix" not in {row["item"] for row in plan["rows"]}
    assert any(fix.startswith("a larger lead: cluster.signal_before_s=") for fix in rows["time-limit notice"]["fix"])
    assert rows["interval advice"]["text"].startswith("every 13 steps")
    notice = plan["notice"]
    assert notice["save_fits"] is False and notice["fits_lead"] is False and notice["step_s"] == 900
    assert round(notice["save_s"]) == 875 and notice["fix"] == rows["time-limit notice"]["fix"]
    assert plan["interval_advice"]["advised_steps"] == 13 and plan["preemption"]["asked"] is False


def test_plan_warns_that_proctrack_cgroup_may_carry_the_sigterm_to_ray_itself():
    line = preemption_line(rehearsal(13), preemption(user_signal=False, proctrack="proctrack/cgroup"))
    assert "the Ray step holds it" in line and "with proctrack/cgroup that SIGTERM is expected to reach Ray's own" \
        in line, line
    plain = preemption_line(rehearsal(13), preemption(user_signal=False, proctrack="proctrack/linuxproc"))
    assert "proctrack" not in plain, plain
