"""The hang watchdog's rules: phase limits, derived timeouts, which node the dumps point at, and the decision a hang
leads to (the sandbox tests run it on real jobs)."""
from __future__ import annotations

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.core.progress import Progress, ProgressRecorder, read_progress
from beam_slurm.policy import hang_watch
from beam_slurm.policy.hang_watch import DumpedProcess, HangLimits, check, suspects
from beam_slurm.policy.requeue import AttemptFacts, decide

LIMITS = HangLimits(timeout_s=None, expected_step_s=60.0, start_s=300.0, save_s=100.0, eval_s=60.0)


def beat(step=3, phase="step", since=1000.0, times=(50.0, 70.0, 60.0)) -> Progress:
    return Progress(step=step, phase=phase, since=since, attempt=0, host="n1", step_seconds=tuple(times))


def test_each_phase_gets_its_limit_and_a_derived_timeout_has_a_floor():
    assert LIMITS.base_s(None) == 600.0  # 5 x 60 s is under the floor
    assert LIMITS.base_s(400.0) == 2000.0
    assert LIMITS.phase_limit_s(None)[0] == 900.0  # bring-up and model load
    assert LIMITS.phase_limit_s(beat(times=()))[0] == 900.0  # the attempt's first step
    assert LIMITS.phase_limit_s(beat())[0] == 600.0
    assert LIMITS.phase_limit_s(beat(phase="saving"))[0] == 700.0
    assert LIMITS.phase_limit_s(beat(phase="eval"))[0] == 660.0
    given = HangLimits(timeout_s=20.0, expected_step_s=60.0, start_s=5.0, save_s=1.0, eval_s=1.0)
    assert given.phase_limit_s(beat())[0] == 20.0


def test_a_silent_phase_is_a_hang_and_a_slow_but_steady_one_is_not():
    limits = HangLimits(timeout_s=20.0, expected_step_s=1.0, start_s=10.0, save_s=5.0, eval_s=1.0)
    assert check(limits, beat(since=1000.0), watching_since=900.0, now=1019.0) is None
    hang = check(limits, beat(since=1000.0), watching_since=900.0, now=1021.0)
    assert hang is not None and hang.describe() == "hang at step 3 (step)" and "limit 20 s" in hang.details()
    # A heartbeat of an earlier attempt counts as none: bring-up's allowance from the Ray step's start.
    assert check(limits, beat(since=800.0), watching_since=900.0, now=925.0) is None
    assert check(limits, beat(since=800.0), watching_since=900.0, now=931.0).describe().startswith("hang in bring-up")
    assert check(limits, beat(phase="finished", since=0.0), watching_since=0.0, now=10**6) is None
    off = HangLimits(timeout_s=0, expected_step_s=1.0, start_s=0, save_s=0, eval_s=0)
    assert check(off, None, watching_since=0.0, now=10**6) is None


def test_the_recorder_writes_phases_and_step_times_the_watchdog_reads(tmp_path):
    recorder = ProgressRecorder(str(tmp_path))
    recorder.step_start(1)
    assert read_progress(tmp_path).phase == "step" and read_progress(tmp_path).step_seconds == ()
    recorder.step_end(1)
    recorder.saved(1)
    assert read_progress(tmp_path).phase == "after-save"
    recorder.step_start(2)
    recorder.eval_start()
    got = read_progress(tmp_path)
    assert (got.step, got.phase, len(got.step_seconds)) == (2, "eval", 1)
    (tmp_path / ".beam" / "progress.json").write_text("{half")
    assert read_progress(tmp_path) is None


def test_the_dumps_name_a_stopped_process_or_the_one_that_waits_elsewhere():
    idle = [DumpedProcess(f"n{i // 2 + 1}", 100 + i, "ray::GpuSlot", "S", "main_loop (worker.py)") for i in range(5)]
    odd = DumpedProcess("n3", 200, "ray::GpuSlot.step", "S", "step (rehearsal.py)")
    nodes, why = suspects([*idle, odd])
    assert nodes == ["n3"] and "step (rehearsal.py)" in why
    nodes, why = suspects([*idle, DumpedProcess("n2", 300, "raylet", "T", "")])
    assert nodes == ["n2"] and "stopped" in why
    assert suspects(idle)[0] == []


def test_a_hang_requeues_counts_against_progress_and_marks_the_suspect():
    facts = AttemptFacts(restart_count=0, max_requeues=3, nodes=("n1", "n2"), hang="hang at step 6 (step)",
                         hang_nodes=("n2",), step_status=143, checkpoint_at_start=None, checkpoint_at_end=4)
    decision = decide(facts)
    assert decision.requeue and decision.end_kind == "hang" and decision.bad_nodes == ("n2",)
    assert decision.reason == "hang at step 6 (step) on n2"
    nothing_saved = decide(AttemptFacts(restart_count=0, max_requeues=3, hang="hang at step 2 (step)",
                                        checkpoint_at_start=4, checkpoint_at_end=4, earlier_without_progress=1))
    assert not nothing_saved.requeue and nothing_saved.counts_against_progress and "hang_timeout_s" in nothing_saved.note


def test_the_timeout_comes_from_the_recipe_and_nccl_stays_behind_it(monkeypatch, tmp_path):
    for name in ("MODEL_PATH", "DATA_DIR", "SKYRL_DIR"):
        monkeypatch.setenv(name, str(tmp_path))
    cfg = load_config(["recipe=mxfp8_64gpu"])
    limits = HangLimits.of(cfg)
    assert limits.timeout_s is None and limits.start_s == cfg.trainer.expected_bringup_s + cfg.trainer.expected_model_load_s
    assert hang_watch.nccl_timeout_s(limits) > limits.longest_s()
    rows = dict((item, value) for _, item, value in hang_watch.plan_rows(limits, {}))
    assert "the watchdog fires first" in rows["NCCL timeout"]
    low = dict((item, value) for _, item, value in hang_watch.plan_rows(limits, {"SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "600"}))
    assert "NCCL's timeout fires first" in low["NCCL timeout"]
    assert HangLimits.of(load_config(["recipe=mxfp8_64gpu", "cluster.hang_timeout_s=0"])).off
    with pytest.raises(Exception, match="cluster.hang_timeout_s"):
        load_config(["recipe=mxfp8_64gpu", "cluster.hang_timeout_s=-5"])
