"""Which failures restart inside the allocation, which requeue and which end the job: the decision from the facts."""
from __future__ import annotations

import errno

import pytest

from beam_slurm.core.ray_records import EXIT_INFRA, classify_driver_error
from beam_slurm.policy.requeue import EXIT_NO_PROGRESS, EXIT_STORAGE_FULL, AttemptFacts, decide

TWO_PLUS_SPARE = dict(restart_count=0, max_requeues=10, nodes=("n1", "n2"), usable_nodes=("n1", "n2", "n3"),
                      nodes_needed=2, max_in_job_attempts=2, time_left_s=3000.0, restart_needs_s=420.0,
                      checkpoint_at_start=None, checkpoint_at_end=4)
WORKER_DIED = dict(step_status=EXIT_INFRA, failure_kind="infra", failure_node="n2")


def test_a_dead_worker_is_replaced_by_the_spare_in_the_same_allocation():
    decision = decide(AttemptFacts(**TWO_PLUS_SPARE, **WORKER_DIED))
    assert decision.restart_in_job and not decision.requeue and decision.outcome == ""
    assert decision.next_nodes == ("n1", "n3") and decision.bad_nodes == ("n2",)
    assert decision.note == "restarting in the job on n1,n3 (n2 left out)"


def test_without_a_spare_the_same_nodes_restart_and_the_next_preflight_checks_the_suspect():
    facts = AttemptFacts(**{**TWO_PLUS_SPARE, "usable_nodes": ("n1", "n2")}, **WORKER_DIED)
    decision = decide(facts)
    assert decision.restart_in_job and decision.next_nodes == ("n1", "n2")
    assert decision.note == "restarting in the job on n1,n2"


def test_a_node_that_failed_preflight_or_left_the_job_is_never_chosen_again():
    # n2 failed preflight earlier in this allocation (not usable); n3 was removed by Slurm (--no-kill).
    facts = AttemptFacts(**{**TWO_PLUS_SPARE, "usable_nodes": ("n1", "n3", "n4"), "nodes": ("n1", "n3")},
                         step_status=137, lost_nodes=("n3",))
    decision = decide(facts)
    assert decision.end_kind == "node-failure" and decision.restart_in_job
    assert decision.next_nodes == ("n1", "n4") and decision.bad_nodes == ("n3",)
    too_few = decide(AttemptFacts(**{**TWO_PLUS_SPARE, "usable_nodes": ("n1", "n3"), "nodes": ("n1", "n3")},
                                  step_status=137, lost_nodes=("n3",)))
    assert too_few.requeue and not too_few.restart_in_job
    assert "no in-job restart: the allocation keeps 1 usable nodes, the Ray step needs 2" in too_few.note


@pytest.mark.parametrize("change, why", [
    ({"in_job_attempt": 2}, "cluster.max_in_job_attempts=2 restarts in this allocation used"),
    ({"time_left_s": 300.0}, "300 s left of the time limit, a restart needs 420 s"),
])
def test_the_allocation_requeues_when_it_cannot_go_on(change, why):
    decision = decide(AttemptFacts(**{**TWO_PLUS_SPARE, **change}, **WORKER_DIED))
    assert decision.requeue and not decision.restart_in_job and why in decision.note


def test_with_in_job_restarts_off_every_failure_requeues_as_before():
    decision = decide(AttemptFacts(**{**TWO_PLUS_SPARE, "max_in_job_attempts": 0}, **WORKER_DIED))
    assert decision.requeue and not decision.restart_in_job and decision.note == ""


def test_a_hang_and_a_preflight_failure_on_some_nodes_restart_in_the_job():
    hang = decide(AttemptFacts(**TWO_PLUS_SPARE, hang="hang at step 6 (step)", hang_nodes=("n2",), step_status=143))
    assert hang.restart_in_job and hang.end_kind == "hang" and hang.next_nodes == ("n1", "n3")
    preflight = decide(AttemptFacts(**{**TWO_PLUS_SPARE, "usable_nodes": ("n1", "n3")}, preflight_failed=True,
                                    preflight_failed_nodes=("n2",), ray_started=False))
    assert preflight.restart_in_job and preflight.next_nodes == ("n1", "n3")


def test_failures_that_will_repeat_never_restart_nor_requeue():
    everywhere = decide(AttemptFacts(**TWO_PLUS_SPARE, preflight_failed=True, preflight_failed_nodes=("n1", "n2"),
                                     ray_started=False))
    assert not everywhere.requeue and not everywhere.restart_in_job and everywhere.outcome == "failed"
    full = decide(AttemptFacts(**TWO_PLUS_SPARE, step_status=1, driver_status=1, failure_kind="storage",
                               failure_reason="No space left on device writing /ckpt/global_step_6/x"))
    assert (full.requeue, full.restart_in_job, full.exit_status, full.end_kind) == (
        False, False, EXIT_STORAGE_FULL, "storage-full")
    assert "/ckpt/global_step_6" in full.note and "the last complete checkpoint is kept (step 4)" in full.note
    bug = decide(AttemptFacts(**TWO_PLUS_SPARE, step_status=1, driver_status=1))
    assert bug.end_kind == "driver-error" and not bug.requeue and not bug.restart_in_job


def test_the_no_progress_guard_counts_in_job_restarts():
    facts = AttemptFacts(**{**TWO_PLUS_SPARE, "checkpoint_at_start": 4, "checkpoint_at_end": 4, "in_job_attempt": 1},
                         earlier_without_progress=1, max_attempts_without_progress=2, **WORKER_DIED)
    decision = decide(facts)
    assert decision.exit_status == EXIT_NO_PROGRESS and not decision.restart_in_job and not decision.requeue


class RayTaskError(Exception):
    """Named as Ray names a task's error, which carries the task's own exception as `cause`."""

    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause


class ActorDiedError(Exception):
    pass


def test_driver_errors_are_classified_by_what_another_attempt_would_meet():
    full = OSError(errno.ENOSPC, "No space left on device", "/ckpt/global_step_6/policy/model.bin")
    assert classify_driver_error(RayTaskError(full)) == (
        "storage", "No space left on device writing /ckpt/global_step_6/policy/model.bin")
    quota = classify_driver_error(RuntimeError("save failed: [Errno 122] Disk quota exceeded: '/ckpt/x'"))
    assert quota is not None and quota[0] == "storage" and "/ckpt/x" in quota[1]
    assert classify_driver_error(ActorDiedError("The actor died unexpectedly"))[0] == "infra"
    assert classify_driver_error(RuntimeError("NCCL error: unhandled system error"))[0] == "infra"
    assert classify_driver_error(KeyError("trainer.epochs")) is None
    assert classify_driver_error(OSError(errno.ENOENT, "No such file or directory", "/model")) is None
