"""The end of an attempt, decided from its recorded facts alone (no Slurm, no files, no clock)."""
from __future__ import annotations

import pytest

from beam_slurm.core.ray_records import EXIT_INFRA, EXIT_SETUP
from beam_slurm.policy.requeue import EXIT_NOT_REQUEUED, EXIT_PREFLIGHT, AttemptFacts, decide, stop_waiting_for_save

FIRST = dict(restart_count=0, max_requeues=10)


def test_a_run_that_finished_ends_the_job_successfully():
    decision = decide(AttemptFacts(**FIRST, step_status=0, driver_status=0))
    assert (decision.requeue, decision.exit_status) == (False, 0)


def test_a_notice_requeues_whether_or_not_the_save_made_it():
    saved = decide(AttemptFacts(**FIRST, notice="SIGUSR1", saved_step=7, step_status=143, driver_status=143))
    assert saved.requeue and saved.reason == "notice SIGUSR1"
    unsaved = decide(AttemptFacts(**FIRST, notice="SIGTERM", saved_step=None, step_status=143))
    assert unsaved.requeue and unsaved.exit_status == EXIT_NOT_REQUEUED


def test_a_run_that_finished_during_the_notice_is_not_requeued():
    decision = decide(AttemptFacts(**FIRST, notice="SIGUSR1", saved_step=None, step_status=0, driver_status=0))
    assert (decision.requeue, decision.exit_status) == (False, 0)
    # a save on notice means the trainer was still running: the remaining steps need another attempt
    assert decide(AttemptFacts(**FIRST, notice="SIGUSR1", saved_step=50, step_status=0, driver_status=0)).requeue


def test_a_notice_before_ray_started_requeues_and_says_so():
    decision = decide(AttemptFacts(**FIRST, notice="SIGTERM", ray_started=False))
    assert decision.requeue and decision.reason == "notice SIGTERM before Ray started"


def test_infrastructure_failures_requeue_and_driver_errors_do_not():
    infra = decide(AttemptFacts(**FIRST, step_status=EXIT_INFRA, failure_kind="infra"))
    assert infra.requeue and infra.reason == "infrastructure failure" and infra.exit_status == EXIT_INFRA
    driver = decide(AttemptFacts(**FIRST, step_status=1, driver_status=3))
    assert (driver.requeue, driver.exit_status, driver.reason) == (False, 3, "the driver failed")
    setup = decide(AttemptFacts(**FIRST, step_status=EXIT_SETUP, failure_kind="setup"))
    assert (setup.requeue, setup.exit_status) == (False, EXIT_SETUP)
    killed = decide(AttemptFacts(**FIRST, step_status=137))
    assert (killed.requeue, killed.exit_status) == (False, 137)


def test_preflight_failure_ends_the_job_without_requeue():
    decision = decide(AttemptFacts(**FIRST, preflight_failed=True, ray_started=False))
    assert (decision.requeue, decision.exit_status) == (False, EXIT_PREFLIGHT)


@pytest.mark.parametrize("facts", [
    dict(notice="SIGUSR1", saved_step=4, step_status=143),
    dict(step_status=EXIT_INFRA, failure_kind="infra"),
])
def test_the_requeue_cap_counts_slurm_restarts(facts):
    below = decide(AttemptFacts(restart_count=9, max_requeues=10, **facts))
    assert below.requeue
    at_cap = decide(AttemptFacts(restart_count=10, max_requeues=10, **facts))
    assert not at_cap.requeue and at_cap.exit_status != 0
    assert "SLURM_RESTART_COUNT=10 reached max_requeues=10" in at_cap.note
    assert not decide(AttemptFacts(restart_count=0, max_requeues=0, **facts)).requeue


def test_waiting_for_the_save_ends_on_save_step_end_second_notice_or_grace():
    wait = dict(received=100.0, grace_s=180.0)
    assert stop_waiting_for_save(now=150.0, saved_step=None, step_running=True, notices=1, **wait) is None
    assert stop_waiting_for_save(now=150.0, saved_step=12, step_running=True, notices=1, **wait) == "saved"
    assert stop_waiting_for_save(now=150.0, saved_step=None, step_running=False, notices=1, **wait) == "the Ray step ended"
    assert stop_waiting_for_save(now=150.0, saved_step=None, step_running=True, notices=2, **wait) == "second notice"
    assert stop_waiting_for_save(now=280.0, saved_step=None, step_running=True, notices=1, **wait) == "grace period over"
    # a save that lands as the grace ends still counts
    assert stop_waiting_for_save(now=280.0, saved_step=12, step_running=True, notices=1, **wait) == "saved"


def test_every_key_the_advice_names_is_a_schema_key():
    """The advice names keys a user sets: each must exist (a renamed key left `checkpoint.max_ckpts_to_keep` here)."""
    import re
    from dataclasses import fields, is_dataclass

    from beam_slurm.config.schema import BeamConfig
    from beam_slurm.policy.requeue import ADVICE

    keys = set()
    for section in fields(BeamConfig):
        value = section.default_factory() if callable(section.default_factory) else None
        if is_dataclass(value):
            keys |= {f"{section.name}.{f.name}" for f in fields(value)}
    named = {m for text in ADVICE.values() for m in re.findall(r"\b[a-z_]+\.[a-z_]+\b", text)}
    assert named and named <= keys, named - keys
