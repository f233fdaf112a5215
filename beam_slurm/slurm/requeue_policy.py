"""How an attempt of the training job ends: requeue, finish or stop. Pure decisions over what the attempt recorded
(no Slurm, no files, no clock), so each rule reads top to bottom and is tested in milliseconds.

`attempt.Attempt` gathers the facts (signals received, the checkpoint saved on notice, the Ray step's and the
driver's statuses, the first failure a node recorded), asks `decide`, and carries the decision out (`scontrol
requeue`, the exit status). While a notice is being handled it asks `stop_waiting_for_save` when to stop waiting.
"""

from __future__ import annotations

from dataclasses import dataclass

from beam_slurm.ray_cluster.records import EXIT_INFRA

EXIT_PREFLIGHT = 3
"""Preflight found a problem on some node; nothing was started."""
EXIT_NOT_REQUEUED = 75
"""Stopped on a notice or by an infrastructure failure, and not requeued (cap reached or requeue failed)."""


@dataclass(frozen=True)
class AttemptFacts:
    """What one attempt recorded by the time it ended."""

    restart_count: int
    """SLURM_RESTART_COUNT of this attempt (0 on the first)."""
    max_requeues: int
    """cluster.max_requeues."""
    preflight_failed: bool = False
    """Preflight named a problem on some node; Ray never started."""
    notice: str | None = None
    """The first notice signal (SIGUSR1, SIGTERM, ...), None when none came."""
    ray_started: bool = True
    """The Ray step was started (a notice can arrive before)."""
    saved_step: int | None = None
    """The step whose checkpoint the trainer saved on the notice, None when it did not save."""
    step_status: int | None = None
    """The Ray step's exit status (srun's), None when it never ran."""
    driver_status: int | None = None
    """The driver's exit status as the head recorded it, None when the driver never ended."""
    failure_kind: str | None = None
    """The first failure a node recorded: 'infra' (a requeue may help), 'setup' (it will not), None."""


@dataclass(frozen=True)
class Decision:
    """What to do at the end of the attempt."""

    requeue: bool
    """Ask Slurm to requeue the job (the next attempt resumes from the latest checkpoint)."""
    exit_status: int
    """The job's exit status when not requeued: the final one, or, with requeue, the one to use if it fails."""
    reason: str
    """Why, as the log says it: 'notice SIGUSR1', 'infrastructure failure', 'the driver failed', ..."""
    note: str = ""
    """More for the log (e.g. why a requeue was not asked for)."""


def decide(facts: AttemptFacts) -> Decision:
    """The end of one attempt, from its facts."""
    if facts.preflight_failed:
        # A node lacks a path, space or GPUs: the same allocation would fail the same way.
        return Decision(False, EXIT_PREFLIGHT, "preflight failed")

    if facts.notice is not None:
        if not facts.ray_started:
            return _requeue_within_cap(facts, f"notice {facts.notice} before Ray started", EXIT_NOT_REQUEUED)
        if facts.saved_step is None and facts.step_status == 0 and facts.driver_status == 0:
            return Decision(False, 0, "the run finished during the notice", "not requeueing")
        # Saved or not, the time is up: the next attempt resumes from the newest complete checkpoint.
        return _requeue_within_cap(facts, f"notice {facts.notice}", EXIT_NOT_REQUEUED)

    if facts.step_status == 0:
        return Decision(False, 0, "the driver finished successfully")

    if facts.failure_kind == "infra":
        # A node's Ray died or never joined: another allocation may well succeed.
        return _requeue_within_cap(facts, "infrastructure failure", facts.step_status or EXIT_INFRA)

    # The driver failed (or bring-up found a configuration fault): the same error would come back.
    if facts.driver_status not in (None, 0):
        status = facts.driver_status
    else:
        status = facts.step_status or 1
    return Decision(False, status, "the driver failed" if facts.driver_status else "the Ray step failed")


def _requeue_within_cap(facts: AttemptFacts, reason: str, status_if_not: int) -> Decision:
    if facts.restart_count >= facts.max_requeues:
        return Decision(False, status_if_not, reason,
                        f"not requeueing, SLURM_RESTART_COUNT={facts.restart_count} reached "
                        f"max_requeues={facts.max_requeues}")
    return Decision(True, status_if_not, reason)


def stop_waiting_for_save(*, now: float, received: float, grace_s: float, saved_step: int | None,
                          step_running: bool, notices: int) -> str | None:
    """While a notice is handled: None to keep waiting for the trainer's checkpoint, else why to stop waiting."""
    if saved_step is not None:
        return "saved"
    if not step_running:
        return "the Ray step ended"
    if notices > 1:
        return "second notice"
    if now >= received + grace_s:
        return "grace period over"
    return None
