"""Operator outcomes, signals that hit every step, the no-progress guard and bad nodes: decided from fixed facts."""
from __future__ import annotations

from beam_slurm.core.ray_records import EXIT_INFRA
from beam_slurm.core.run_record import Attempt
from beam_slurm.policy.requeue import (
    EXIT_CANCELLED,
    EXIT_NO_PROGRESS,
    EXIT_PREFLIGHT,
    EXIT_STOPPED,
    AttemptFacts,
    decide,
    exclusion,
    failed_node,
    no_progress_streak,
    slurm_end_of,
)
from beam_slurm.slurm.values import reported_seconds as duration_seconds

FIRST = dict(restart_count=0, max_requeues=10, nodes=("n1", "n2"), max_attempts_without_progress=2)
NODE_DIED = dict(step_status=EXIT_INFRA, failure_kind="infra", failure_node="n2")


def test_operator_stop_ends_stopped_and_requeue_requeues_without_counting():
    stop = decide(AttemptFacts(**FIRST, notice="SIGUSR2", wanted="stop", saved_step=7, step_status=143))
    assert (stop.requeue, stop.exit_status, stop.end_kind, stop.outcome) == (False, EXIT_STOPPED, "stopped", "stopped")
    assert stop.exit_status != 0, "not COMPLETED: afterok dependents must not run"
    requeue = decide(AttemptFacts(**FIRST, notice="SIGUSR2", wanted="requeue", saved_step=7, step_status=143,
                                  earlier_without_progress=5))
    assert requeue.requeue and requeue.end_kind == "operator-requeue" and not requeue.counts_against_progress


def test_slurm_requeue_is_recognised_and_scancel_is_not_requeued():
    requeued = decide(AttemptFacts(**FIRST, notice="SIGTERM", slurm_end="requeued", step_status=143))
    assert requeued.already_requeued and not requeued.requeue and requeued.end_kind == "slurm-requeue"
    cancelled = decide(AttemptFacts(**FIRST, notice="SIGTERM", slurm_end="cancelled", step_status=143))
    assert (cancelled.requeue, cancelled.exit_status, cancelled.end_kind) == (False, EXIT_CANCELLED, "cancelled")
    preempted = decide(AttemptFacts(**FIRST, slurm_end="preempted", step_status=143))
    assert preempted.requeue and preempted.end_kind == "preempted" and not preempted.counts_against_progress


def test_what_slurm_is_doing_is_read_from_scontrol_fields():
    running = dict(job_state="RUNNING", restarts=0, restart_count=0, preempt_time="None", time_left_s=600.0,
                   reason="None")
    assert slurm_end_of(**running) is None
    assert slurm_end_of(**{**running, "job_state": "COMPLETING", "restarts": 1}) == "requeued"
    assert slurm_end_of(**{**running, "job_state": "COMPLETING"}) == "cancelled"
    assert slurm_end_of(**{**running, "preempt_time": "2026-11-30T07:09:27"}) == "preempted"
    assert slurm_end_of(**{**running, "job_state": "COMPLETING", "time_left_s": 0.0}) == "time limit"
    # As the batch shell saw them on the sandbox (Slurm 22.05), right after the SIGTERM: a scancel and the time limit
    # both show COMPLETING with EndTime set to that moment; only the reason and TimeLimit - RunTime tell them apart.
    assert slurm_end_of(**{**running, "job_state": "COMPLETING", "reason": "None",
                           "time_left_s": float(duration_seconds("365-00:00:00") - duration_seconds("00:00:07"))}) \
        == "cancelled"
    assert slurm_end_of(**{**running, "job_state": "COMPLETING", "reason": "TimeLimit",
                           "time_left_s": float(duration_seconds("00:01:00") - duration_seconds("00:01:12"))}) \
        == "time limit"
    assert slurm_end_of(**{**running, "job_state": "COMPLETING", "reason": "TimeLimit", "time_left_s": None}) \
        == "time limit"
    assert [duration_seconds(t) for t in ("20", "00:01:12", "1-02:00:00", "5:00", "UNLIMITED", "", "1-x")] == \
        [20, 72, 93600, 300, None, None, None]


def test_failures_without_a_newer_checkpoint_stop_at_the_limit():
    first = decide(AttemptFacts(**FIRST, **NODE_DIED))
    assert first.requeue and first.counts_against_progress and first.bad_nodes == ("n2",)
    second = decide(AttemptFacts(**{**FIRST, "restart_count": 1}, **NODE_DIED, earlier_without_progress=1))
    assert (second.requeue, second.exit_status, second.outcome) == (False, EXIT_NO_PROGRESS, "failed")
    assert "2 attempts in a row" in second.note and "max_attempts_without_progress=2" in second.note
    assert "submit` again resumes" in second.note
    progressed = decide(AttemptFacts(**{**FIRST, "restart_count": 1}, **NODE_DIED, earlier_without_progress=1,
                                     checkpoint_at_start=10, checkpoint_at_end=20))
    assert progressed.requeue and not progressed.counts_against_progress
    unlimited = decide(AttemptFacts(**{**FIRST, "max_attempts_without_progress": 0}, **NODE_DIED,
                                    earlier_without_progress=9))
    assert unlimited.requeue


def test_a_time_limit_notice_whose_save_missed_counts_and_a_saved_one_does_not():
    missed = decide(AttemptFacts(**FIRST, notice="SIGUSR1", step_status=143, earlier_without_progress=1))
    assert not missed.requeue and missed.exit_status == EXIT_NO_PROGRESS
    assert "signal_before_s" in missed.note
    saved = decide(AttemptFacts(**FIRST, notice="SIGUSR1", saved_step=4, step_status=143, checkpoint_at_end=4,
                                earlier_without_progress=1))
    assert saved.requeue


def test_the_streak_counts_only_the_latest_attempts_in_a_row():
    counts = [Attempt(counts_against_progress=c) for c in (True, False, True, True)]
    assert no_progress_streak(counts) == 2
    assert no_progress_streak([Attempt(counts_against_progress=True), Attempt(end_kind="operator-requeue")]) == 0


def test_preflight_on_some_nodes_names_them_bad_and_on_all_nodes_fails():
    some = decide(AttemptFacts(**FIRST, preflight_failed=True, preflight_failed_nodes=("n2",), ray_started=False))
    assert some.requeue and some.bad_nodes == ("n2",) and some.end_kind == "preflight"
    every = decide(AttemptFacts(**FIRST, preflight_failed=True, preflight_failed_nodes=("n1", "n2"), ray_started=False))
    assert (every.requeue, every.exit_status, every.bad_nodes) == (False, EXIT_PREFLIGHT, ())


def test_the_node_a_failure_is_about():
    assert failed_node({"kind": "infra", "node": "n2", "reason": "node n2: this node's Ray (raylet) died"}, "n1") == "n2"
    assert failed_node({"kind": "infra", "node": "n1", "reason": "node n3 (10.0.0.3): its Ray has not answered"},
                       "n1") == "n3"
    assert failed_node({"kind": "infra", "node": "n2", "reason": "node n2: the head's GCS at 1.2.3.4:6379 has been "
                        "unreachable for 20s"}, "n1") == "n1"
    assert failed_node({"kind": "infra", "node": "n1", "reason": "Ray cluster not complete after "
                        "ray.readiness_timeout_s=60s: n4: its task never started (no registration file)"}, "n1") == "n4"
    assert failed_node({"kind": "setup", "node": "n2", "reason": "node n2: ..."}, "n1") is None


def test_the_exclusion_keeps_the_users_own_and_needs_enough_nodes():
    assert exclusion(["n2"], ["n4"], ["n1", "n2", "n3", "n4"], 2) == (["n2", "n4"], "")
    wanted, why = exclusion(["n2", "n3"], ["n4"], ["n1", "n2", "n3", "n4"], 2)
    assert wanted is None and "would leave 1 usable nodes" in why and "needs 2" in why
    assert exclusion([], [], ["n1"], 1)[0] is None
