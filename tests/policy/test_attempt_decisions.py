"""The decisions the attempt runner asks while it runs (policy.attempt), over recorded facts alone."""
from __future__ import annotations

import pytest

from beam_slurm.core.run_record import TrainJob, Wanted
from beam_slurm.policy.attempt import (
    AttemptState,
    bad_node_reasons,
    bad_nodes_to_avoid,
    decision_summary,
    failure_reason,
    notice_missed_at_start,
    outcome_reason,
    save_grace_s,
    save_reason,
    slurm_end_of_job,
    time_left_s,
)
from beam_slurm.policy.requeue import Decision


@pytest.mark.parametrize(("info", "left"), [
    ({"TimeLimit": "01:00:00", "RunTime": "00:59:10"}, 50.0),
    ({"TimeLimit": "1-00:00:00", "RunTime": "23:00:00"}, 3600.0),
    ({"TimeLimit": "00:10:00", "RunTime": "00:10:05"}, -5.0),  # past the limit, still completing
    ({"TimeLimit": "UNLIMITED", "RunTime": "00:01:00"}, None),
    ({"TimeLimit": "00:10:00"}, None),  # scontrol said nothing of the run time
    ({}, None),
])
def test_time_left_is_the_limit_less_the_run_time(info, left):
    assert time_left_s(info) == left


def test_the_controllers_time_limit_wins_over_the_jobs_end_time_variable():
    """SLURM_JOB_END_TIME is fixed at the start: after `scontrol update TimeLimit` only scontrol is right."""
    info = {"TimeLimit": "00:30:00", "RunTime": "00:05:00"}
    assert time_left_s(info, job_end_time="1000600", now=1000000.0) == 1500.0
    assert time_left_s({**info, "TimeLimit": "UNLIMITED"}, job_end_time="1000600", now=1000000.0) is None


@pytest.mark.parametrize(
    ("end_time", "left"), [("1000600", 600.0), ("999990", -10.0), ("", None), (None, None), ("soon", None)]
)
def test_without_an_answer_from_scontrol_the_jobs_end_time_variable_serves(end_time, left):
    assert time_left_s({}, job_end_time=end_time, now=1000000.0) == left


def test_slurm_end_of_job_reads_scontrols_fields():
    running = {"JobState": "RUNNING", "Restarts": "0", "TimeLimit": "01:00:00", "RunTime": "00:10:00"}
    assert slurm_end_of_job(running, 0) is None
    assert slurm_end_of_job({**running, "Restarts": "2"}, 1) == "requeued"  # requeued past this attempt
    assert slurm_end_of_job({**running, "Restarts": "1"}, 1) is None
    assert slurm_end_of_job({**running, "PreemptTime": "2024-05-01T10:00:00"}, 0) == "preempted"
    assert slurm_end_of_job({**running, "PreemptTime": "None"}, 0) is None
    assert slurm_end_of_job({**running, "JobState": "COMPLETING", "RunTime": "01:00:00"}, 0) == "time limit"
    assert slurm_end_of_job({**running, "JobState": "COMPLETING"}, 0) == "cancelled"
    assert slurm_end_of_job({**running, "JobState": "COMPLETING", "Restarts": "n/a"}, 0) == "cancelled"


def test_a_start_inside_the_notice_lead_takes_the_missed_notice():
    assert notice_missed_at_start(100.0, signal_before_s=60)  # Slurm sends it up to 60 s early
    assert notice_missed_at_start(120.0, signal_before_s=60)
    assert not notice_missed_at_start(121.0, signal_before_s=60)
    assert not notice_missed_at_start(None, signal_before_s=60)  # unlimited: no notice comes


def test_a_first_attempt_on_a_recorded_bad_node_avoids_it_once():
    state = AttemptState(step_nodes=["n3", "n1", "n2"], bad_nodes=["n9", "n2", "n1"])
    assert bad_nodes_to_avoid(state) == ["n1", "n2"]
    assert bad_nodes_to_avoid(AttemptState(step_nodes=["n1", "n2"], bad_nodes=["n9"])) == []
    spent = AttemptState(step_nodes=["n1"], bad_nodes=["n1"], job_entry=TrainJob(avoided_bad_nodes=True))
    assert bad_nodes_to_avoid(spent) == []
    # an in-job restart chose its nodes itself, suspects last
    assert bad_nodes_to_avoid(AttemptState(in_job=1, step_nodes=["n1"], bad_nodes=["n1"])) == []


def test_the_save_waits_for_the_operators_timeout_else_the_grace():
    assert save_grace_s(None, 90.0) == 90.0
    assert save_grace_s(Wanted(action="stop", timeout_s=300.0), 90.0) == 300.0
    assert save_grace_s(Wanted(action="requeue"), 90.0) == 90.0  # the verb set no timeout


def test_the_save_reason_names_the_operator_the_relayed_preemption_or_the_signal():
    operator = Wanted(action="requeue", by="alice")
    assert save_reason("SIGUSR2", operator, relayed=False) == "beam-slurm requeue by alice"
    assert save_reason("SIGUSR2", Wanted(action="stop"), relayed=False) == "beam-slurm stop by ?"
    assert save_reason("SIGUSR1", None, relayed=True) == "the preemption's SIGTERM to the tasks, relayed by the Ray head"
    assert save_reason("SIGUSR1", None, relayed=False) == "SIGUSR1 (time limit or preemption)"
    # only the head's USR1 is a relay; a SIGTERM to this shell is the signal itself
    assert save_reason("SIGTERM", None, relayed=True) == "SIGTERM (time limit or preemption)"


def test_the_failure_reason_says_what_full_storage_has_left():
    assert failure_reason(None, "/ckpt", None) == ""
    assert failure_reason({}, "/ckpt", None) == ""
    infra = {"kind": "infra", "reason": "node n2: raylet died"}
    assert failure_reason(infra, "/ckpt", (1, 2)) == "node n2: raylet died"  # usage only for storage
    full = {"kind": "storage", "reason": "save failed: no space left"}
    assert failure_reason(full, "/ckpt", (3 * 2**20, 100 * 2**20)) == (
        "save failed: no space left; checkpoint storage /ckpt: 3.0 MiB free of 100.0 MiB"
    )
    assert failure_reason(full, "/ckpt", None) == "save failed: no space left; checkpoint storage /ckpt"


@pytest.mark.parametrize(("decision", "summary"), [
    (Decision(False, 0, "slurm", already_requeued=True), "requeued by Slurm"),
    (Decision(False, 75, "hang", restart_in_job=True), "restart in job"),
    (Decision(True, 75, "notice SIGUSR1"), "requeue"),
    (Decision(False, 79, "stopped"), "end (79)"),
])
def test_the_decision_summary(decision, summary):
    assert decision_summary(decision) == summary


def test_each_bad_node_gets_the_recorded_failure_or_the_decisions_reason():
    decision = Decision(True, 75, "infrastructure failure", bad_nodes=("n1", "n2"), end_kind="node-failure")
    failure = {"kind": "infra", "reason": "node n2: raylet died"}
    assert bad_node_reasons(decision, "n2", failure) == [
        ("n1", "infrastructure failure"),
        ("n2", "node n2: raylet died"),
    ]
    assert bad_node_reasons(decision, "n2", None) == [("n1", "infrastructure failure"), ("n2", "node failure")]
    preflight = Decision(True, 3, "preflight failed on n1", bad_nodes=("n1",), end_kind="preflight")
    assert bad_node_reasons(preflight, None, None) == [("n1", "preflight failed there")]
    assert bad_node_reasons(Decision(False, 0, "finished"), "n1", failure) == []


def test_the_outcome_reason():
    assert outcome_reason("completed", 40, "the driver finished successfully") == "finished at step 40"
    assert outcome_reason("completed", None, "the driver finished successfully") == "finished"
    assert outcome_reason("stopped", 12, "stopped by the operator") == "stopped at step 12, resumable"
    assert outcome_reason("stopped", None, "stopped by the operator") == "stopped before any checkpoint, resumable"
    assert outcome_reason("failed", 12, "the driver failed") == "the driver failed"
    assert outcome_reason(None, 12, "notice SIGUSR1") == "notice SIGUSR1"
