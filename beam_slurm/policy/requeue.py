"""How an attempt of the training job ends: requeue, finish, stop or fail. Pure decisions over what the attempt recorded
(no Slurm, no files, no clock), so each rule reads top to bottom and is tested in milliseconds; `attempt.Attempt`
gathers the facts, asks `decide` (and `stop_waiting_for_save` while a notice is handled) and carries the decision out.
End kinds (`Decision.end_kind`): docs, guides/operations.md, "End reasons".

A node failure, a hang or a preflight failure on some nodes restarts in the job (`Decision.restart_in_job`: a new Ray
step in the same allocation, from the latest checkpoint) while the allocation keeps enough usable nodes (spares first,
then the suspect nodes themselves: the next preflight checks them), time is left and the attempt is within
cluster.max_in_job_attempts; otherwise it requeues or ends as `_decide` says."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from beam_slurm.core.ray_records import EXIT_INFRA
from beam_slurm.core.run_record import Attempt

EXIT_PREFLIGHT = 3  # preflight found a problem on every node; nothing was started
EXIT_NOT_REQUEUED = 75  # stopped on a notice or an infrastructure failure, and not requeued
EXIT_STOPPED = 79  # `beam-slurm stop` after saving: FAILED, not COMPLETED, so `afterok` dependents do not start
EXIT_NO_PROGRESS = 76  # cluster.max_attempts_without_progress failures in a row without a newer checkpoint
EXIT_CANCELLED = 143  # `scancel`: ended as Slurm says, never requeued by the job itself
EXIT_STORAGE_FULL = 77  # a save found the checkpoint storage full: every attempt would fail the same way
IN_JOB_KINDS = ("node-failure", "hang", "preflight")
"""End kinds that restart in the allocation while it can go on."""

# What to change, per kind of failure, when the no-progress guard ends the run.
ADVICE = {
    "time-limit": "raise cluster.time_limit, or lower checkpoint.interval so a checkpoint lands within one attempt",
    "notice": "the save does not fit the notice: raise cluster.signal_before_s and cluster.grace_s",
    "node-failure": "check the nodes named in the log (they are excluded from later attempts), or set "
    "cluster.extra_sbatch_args=[--exclude=...]",
    "preflight": "fix what preflight named on those nodes, or exclude them",
    "driver-error": "read the driver's log in the attempt folder",
    "storage-full": "free space on the checkpoint storage, raise its quota, or lower checkpoint.max_to_keep",
    "hang": "read the stack dumps in the attempt's hang/ folder; raise cluster.hang_timeout_s if the phase is only "
    "slow",
}


@dataclass(frozen=True)
class AttemptFacts:
    """What one attempt recorded by the time it ended."""

    restart_count: int  # SLURM_RESTART_COUNT (0 on the first attempt)
    max_requeues: int
    preflight_failed: bool = False  # Ray never started
    preflight_failed_nodes: tuple[str, ...] = ()  # empty = not known
    nodes: tuple[str, ...] = ()  # the Ray step's, in Slurm's order: the head is the first
    notice: str | None = None  # the first notice signal (SIGUSR1, SIGTERM, ...)
    slurm_end: str | None = None  # what Slurm was doing to the job when the signal came (`slurm_end_of`)
    wanted: str | None = None  # the operator's wish from the run record (`beam-slurm requeue|stop`)
    ray_started: bool = True  # a notice can arrive before
    saved_step: int | None = None  # the step the trainer saved on the notice
    step_status: int | None = None  # srun's, None when the Ray step never ran
    driver_status: int | None = None  # as the head recorded it, None when the driver never ended
    failure_kind: str | None = None  # the first failure a node recorded: 'infra' (a requeue may help) or 'setup'
    failure_node: str | None = None  # the node that failure is about (`failed_node`)
    checkpoint_at_start: int | None = None  # the newest complete checkpoint
    checkpoint_at_end: int | None = None
    earlier_without_progress: int = 0  # `no_progress_streak` of the attempts before
    max_attempts_without_progress: int = 2
    hang: str | None = None  # the hang watchdog's finding ('hang at step 6: no progress for 31 s (limit 20 s)')
    hang_nodes: tuple[str, ...] = ()  # where the dumps point, and where a process survived SIGKILL
    failure_reason: str = ""  # the recorded failure's reason
    lost_nodes: tuple[str, ...] = ()  # nodes Slurm removed from the job during the attempt (--no-kill)
    in_job_attempt: int = 0  # 0 for the allocation's first Ray step
    max_in_job_attempts: int = 0
    usable_nodes: tuple[str, ...] = ()  # the allocation's nodes now, less those that failed preflight in it
    nodes_needed: int = 0  # the Ray step's node count
    time_left_s: float | None = None  # of the job's time limit; None: unlimited or unknown
    restart_needs_s: float = 0.0  # the least time left worth a restart (a notice lead and a bring-up)

    @property
    def progressed(self) -> bool:
        """A checkpoint newer than the one the attempt started from."""
        start, end = self.checkpoint_at_start, self.checkpoint_at_end
        return end is not None and (start is None or end > start)


@dataclass(frozen=True)
class Decision:
    """What to do at the end of the attempt."""

    requeue: bool  # the next attempt resumes from the latest checkpoint
    exit_status: int  # the final one, or, with requeue, the one to use if the requeue fails
    reason: str  # as the log says it: 'notice SIGUSR1', 'infrastructure failure', ...
    note: str = ""
    end_kind: str = ""  # see the module docstring
    already_requeued: bool = False  # Slurm requeued the job itself: nothing to ask
    bad_nodes: tuple[str, ...] = ()  # go on the run's bad-node list, excluded from later attempts
    counts_against_progress: bool = False  # towards cluster.max_attempts_without_progress
    outcome: str = ""  # 'completed', 'stopped', 'failed', 'cancelled'; '' when requeued
    retryable: bool = False  # another attempt may succeed (requeued, or not only for the requeue cap)
    restart_in_job: bool = False  # a new Ray step in this allocation instead of the requeue
    next_nodes: tuple[str, ...] = ()  # with restart_in_job: the nodes of the next Ray step, in allocation order


def preempted(preempt_time: str | None) -> bool:
    """`scontrol show job`'s PreemptTime says the job is being preempted (set from the preemption on)."""
    return bool(preempt_time) and preempt_time not in ("None", "Unknown", "(null)")


def slurm_end_of(
    *, job_state: str, restarts: int, restart_count: int, preempt_time: str, time_left_s: float | None, reason: str
) -> str | None:
    """What Slurm is doing to the job (`scontrol show job` right after a SIGTERM or the Ray step's death): 'requeued'
    (Restarts above this attempt's count), 'preempted' (PreemptTime set), 'time limit' (Reason=TimeLimit, or no time
    left of TimeLimit - RunTime), 'cancelled' (completing otherwise: `scancel`), or None."""
    state = (job_state or "").split()[0] if job_state else ""
    if restarts > restart_count or state in ("REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "PENDING"):
        return "requeued"
    if preempted(preempt_time):
        return "preempted"
    if state == "TIMEOUT" or reason == "TimeLimit" or (time_left_s is not None and time_left_s <= 0):
        return "time limit"
    return "cancelled" if state in ("COMPLETING", "CANCELLED") else None


def failed_node(failure: dict[str, Any] | None, head: str | None) -> str | None:
    """The node a failure reason names (`node <host>:`), or None; when a worker saw the head vanish, the head is bad."""
    if not failure or failure.get("kind") != "infra":
        return None
    reason = str(failure.get("reason") or "")
    if "the head's" in reason or "the head (" in reason:
        return head
    words = reason.split()
    if len(words) >= 2 and words[0] == "node":
        return words[1].rstrip(":")
    if "Ray cluster not complete" in reason:
        # "...: n3: its task never started ...; n4 (10.0.0.4): started but ..." -> the first node named
        tail = reason.split(": ", 1)[1] if ": " in reason else ""
        names = (part.split(":")[0].split(" (")[0].strip() for part in tail.split("; "))
        return next((name for name in names if name and " " not in name), failure.get("node"))
    return failure.get("node")


def no_progress_streak(attempts: list[Attempt]) -> int:
    """Attempts in a row at the end of `attempts` (run-record entries, oldest first) that counted against progress."""
    return next((i for i, entry in enumerate(reversed(attempts)) if not entry.counts_against_progress), len(attempts))


def exclusion(
    bad_nodes: list[str], user_exclude: list[str], partition_nodes: list[str], nodes_needed: int
) -> tuple[list[str] | None, str]:
    """The job's new ExcNodeList (bad nodes plus the user's own `--exclude`), or None and why not: the partition
    (its usable nodes) must keep `nodes_needed` nodes outside the list. An empty `partition_nodes` means unknown."""
    wanted = sorted(set(bad_nodes) | set(user_exclude))
    if not bad_nodes:
        return None, "no bad nodes"
    if not partition_nodes:
        return None, "the partition's nodes are unknown"
    left = [n for n in partition_nodes if n not in wanted]
    if len(left) < nodes_needed:
        return None, (
            f"excluding {','.join(wanted)} would leave {len(left)} usable nodes in the partition, the job "
            f"needs {nodes_needed}"
        )
    return wanted, ""


def next_nodes(facts: AttemptFacts, bad: tuple[str, ...]) -> tuple[tuple[str, ...] | None, str]:
    """The next in-job Ray step's nodes (healthy ones first, then spares, then the suspects), or None and why not."""
    usable = [n for n in facts.usable_nodes if n not in facts.lost_nodes]
    preferred = [n for n in usable if n not in bad] + [n for n in usable if n in bad]
    if len(preferred) < facts.nodes_needed:
        return None, f"the allocation keeps {len(preferred)} usable nodes, the Ray step needs {facts.nodes_needed}"
    return tuple(n for n in usable if n in preferred[: facts.nodes_needed]), ""


def in_job(facts: AttemptFacts, decision: Decision) -> Decision:
    """The decision turned into a restart in this allocation, when one may go on; else as it was."""
    if not decision.retryable or decision.end_kind not in IN_JOB_KINDS or facts.max_in_job_attempts == 0:
        return decision  # (0: in-job restarts are off, nothing to say)
    why = ""
    if facts.in_job_attempt >= facts.max_in_job_attempts:
        why = f"cluster.max_in_job_attempts={facts.max_in_job_attempts} restarts in this allocation used"
    elif facts.time_left_s is not None and facts.time_left_s < facts.restart_needs_s:
        why = f"{facts.time_left_s:.0f} s left of the time limit, a restart needs {facts.restart_needs_s:.0f} s"
    nodes, no_nodes = next_nodes(facts, decision.bad_nodes) if not why else (None, "")
    if nodes is None:
        note = f"no in-job restart: {why or no_nodes}"
        return dataclasses.replace(decision, note=f"{decision.note}; {note}" if decision.note else note)
    replaced = sorted(set(facts.nodes) - set(nodes))
    note = f"restarting in the job on {','.join(nodes)}" + (f" ({','.join(replaced)} left out)" if replaced else "")
    return dataclasses.replace(decision, requeue=False, restart_in_job=True, next_nodes=nodes, note=note, outcome="")


def decide(facts: AttemptFacts) -> Decision:
    decision = in_job(facts, _decide(facts))
    if (decision.requeue or decision.restart_in_job) and decision.counts_against_progress and not facts.progressed:
        in_a_row, limit = facts.earlier_without_progress + 1, facts.max_attempts_without_progress
        if limit > 0 and in_a_row >= limit:
            since = (
                "no checkpoint yet"
                if facts.checkpoint_at_end is None
                else f"the newest checkpoint is still step {facts.checkpoint_at_end}"
            )
            advice = ADVICE.get(decision.end_kind, "")
            return Decision(
                False,
                EXIT_NO_PROGRESS,
                decision.reason,
                f"not requeueing: {in_a_row} attempts in a row ended by a failure without a newer "
                f"checkpoint ({since}; cluster.max_attempts_without_progress={limit})"
                + (f"; {advice}" if advice else "")
                + "; `beam-slurm submit` again resumes from the last checkpoint",
                end_kind=decision.end_kind,
                bad_nodes=decision.bad_nodes,
                counts_against_progress=True,
                outcome="failed",
            )
    return decision


def _decide(facts: AttemptFacts) -> Decision:
    if facts.preflight_failed:
        named = [n for n in facts.preflight_failed_nodes if n in facts.nodes]
        if named and len(named) < len(facts.nodes):
            # Some nodes lack a path, space or GPUs that the others have: another allocation without them may work.
            return _requeue_within_cap(
                facts,
                f"preflight failed on {','.join(named)}",
                EXIT_PREFLIGHT,
                end_kind="preflight",
                bad_nodes=tuple(named),
                counts=True,
            )
        # Every node fails the same way: the setup is wrong, the same allocation would fail the same way.
        return Decision(False, EXIT_PREFLIGHT, "preflight failed", end_kind="preflight", outcome="failed")
    if facts.slurm_end == "requeued":
        return Decision(
            False,
            0,
            "Slurm requeued the job (scontrol requeue or a requeue by the scheduler)",
            "every step was signalled at once, so nothing was saved; the next attempt resumes from the "
            "last complete checkpoint",
            end_kind="slurm-requeue",
            already_requeued=True,
        )
    if facts.slurm_end == "cancelled" and facts.wanted is None:
        return Decision(
            False,
            EXIT_CANCELLED,
            "the job was cancelled (scancel)",
            "not requeueing",
            end_kind="cancelled",
            outcome="cancelled",
        )
    if facts.failure_kind == "storage":
        # The same save fails on any node after any requeue: say what is full instead of burning attempts.
        return Decision(
            False,
            EXIT_STORAGE_FULL,
            "checkpoint storage full",
            f"{facts.failure_reason}; not "
            f"requeueing; {ADVICE['storage-full']}; the last complete checkpoint is kept (step "
            f"{facts.checkpoint_at_end})",
            end_kind="storage-full",
            outcome="failed",
        )
    if facts.hang is not None:
        where = f" on {','.join(facts.hang_nodes)}" if facts.hang_nodes else ""
        return _requeue_within_cap(
            facts,
            facts.hang + where,
            EXIT_NOT_REQUEUED,
            end_kind="hang",
            bad_nodes=facts.hang_nodes,
            counts=True,
            where=where,
        )
    if facts.slurm_end == "time limit" and facts.wanted is None and facts.saved_step is None:
        # Slurm is ending the job at its limit (every step signalled): requeue while it still can be.
        return _requeue_within_cap(
            facts, "the time limit came without a saved notice", EXIT_NOT_REQUEUED, end_kind="time-limit", counts=True
        )
    if facts.notice is not None or facts.wanted is not None:
        if facts.wanted == "stop":
            saved = f" at step {facts.saved_step}" if facts.saved_step is not None else ""
            return Decision(
                False,
                EXIT_STOPPED,
                f"stopped by the operator{saved}",
                "resumable: `beam-slurm submit` again resumes from the last checkpoint",
                end_kind="stopped",
                outcome="stopped",
            )
        if facts.wanted == "requeue":
            return _requeue_within_cap(facts, "operator requeue", EXIT_NOT_REQUEUED, end_kind="operator-requeue")
        kind = "preempted" if facts.slurm_end == "preempted" else "notice"
        if not facts.ray_started:
            return _requeue_within_cap(
                facts, f"notice {facts.notice} before Ray started", EXIT_NOT_REQUEUED, end_kind=kind
            )
        if facts.saved_step is None and facts.step_status == 0 and facts.driver_status == 0:
            return Decision(
                False,
                0,
                "the run finished during the notice",
                "not requeueing",
                end_kind="finished",
                outcome="completed",
            )
        # Saved or not, the time is up: the next attempt resumes from the newest complete checkpoint. A time-limit
        # notice whose save did not land counts against progress (the notice lead is too short for the save).
        unsaved_limit = kind == "notice" and facts.saved_step is None and facts.slurm_end != "preempted"
        return _requeue_within_cap(
            facts, f"notice {facts.notice}", EXIT_NOT_REQUEUED, end_kind=kind, counts=unsaved_limit
        )
    if facts.step_status == 0:
        return Decision(False, 0, "the driver finished successfully", end_kind="finished", outcome="completed")
    if facts.slurm_end == "preempted":
        # The steps were signalled without a notice to this shell: requeue before the grace time ends.
        return _requeue_within_cap(facts, "preemption (no notice)", EXIT_NOT_REQUEUED, end_kind="preempted")
    if facts.lost_nodes:
        # Slurm removed failed nodes from the job (--no-kill) and SIGKILLed the step: nothing was saved.
        lost = ",".join(facts.lost_nodes)
        return _requeue_within_cap(
            facts,
            f"node failure: Slurm removed {lost} from the job",
            facts.step_status or EXIT_INFRA,
            end_kind="node-failure",
            bad_nodes=facts.lost_nodes,
            counts=True,
            where=f" on {lost}",
        )
    if facts.failure_kind == "infra":
        # A node's Ray died or never joined: another allocation may well succeed (without that node).
        bad = (facts.failure_node,) if facts.failure_node else ()
        where = f" on {facts.failure_node}" if facts.failure_node else ""
        return _requeue_within_cap(
            facts,
            "infrastructure failure",
            facts.step_status or EXIT_INFRA,
            end_kind="node-failure",
            bad_nodes=bad,
            counts=True,
            where=where,
        )
    # The driver failed (or bring-up found a configuration fault): the same error would come back.
    status = facts.driver_status if facts.driver_status not in (None, 0) else facts.step_status or 1
    kind = "setup-error" if facts.failure_kind == "setup" else "driver-error"
    return Decision(
        False,
        status,
        "the driver failed" if facts.driver_status else "the Ray step failed",
        end_kind=kind,
        counts_against_progress=not facts.progressed,
        outcome="failed",
    )


def _requeue_within_cap(
    facts: AttemptFacts,
    reason: str,
    status_if_not: int,
    *,
    end_kind: str,
    bad_nodes: tuple[str, ...] = (),
    counts: bool = False,
    where: str = "",
) -> Decision:
    counts = counts and not facts.progressed
    if facts.restart_count >= facts.max_requeues:
        return Decision(
            False,
            status_if_not,
            reason,
            f"{where.strip() + ': ' if where else ''}not requeueing, SLURM_RESTART_COUNT="
            f"{facts.restart_count} reached max_requeues={facts.max_requeues}",
            end_kind=end_kind,
            bad_nodes=bad_nodes,
            counts_against_progress=counts,
            outcome="failed",
            retryable=True,
        )
    return Decision(
        True,
        status_if_not,
        reason,
        end_kind=end_kind,
        bad_nodes=bad_nodes,
        counts_against_progress=counts,
        retryable=True,
    )


def stop_waiting_for_save(
    *, now: float, received: float, grace_s: float, saved_step: int | None, step_running: bool, notices: int
) -> str | None:
    """While a notice is handled: None to keep waiting for the trainer's checkpoint, else why to stop waiting."""
    reasons = (
        (saved_step is not None, "saved"),
        (not step_running, "the Ray step ended"),
        (notices > 1, "second notice"),
        (now >= received + grace_s, "grace period over"),
    )
    return next((why for stop, why in reasons if stop), None)
