"""One attempt of the training job as its runner (`jobs.training.attempt.Attempt`) sees it: what the attempt has
recorded (`AttemptState`) and the decisions the runner asks at each point, over those facts. Pure (no Slurm, no files,
no clock); how the attempt ends is `requeue.decide`."""

from __future__ import annotations

from dataclasses import dataclass, field

from beam_slurm.core.run_record import TrainJob, Wanted
from beam_slurm.policy.requeue import Decision, slurm_end_of
from beam_slurm.slurm.values import reported_seconds

NOTICE_EARLY_S = 60.0  # Slurm may send the time-limit notice this much before `signal_before_s`


@dataclass
class AttemptState:
    """What one attempt knows: where it runs (from its caller) and what it recorded while running."""

    in_job: int = 0  # 0 for the allocation's first Ray step, then 1, 2, ... for each restart in it
    step_nodes: list[str] = field(default_factory=list)  # the Ray step's, in allocation order (the head first)
    allocation_bad: tuple[str, ...] = ()  # failed a preflight in an earlier in-job attempt: never again
    replaced: list[str] = field(default_factory=list)  # `old -> new` for each node an in-job restart replaced
    # Shared with the next in-job attempt: a notice between two Ray steps is not lost.
    notices: list[tuple[str, float]] = field(default_factory=list)
    started_at: float = 0.0  # when the process started: the bring-up timing's job_start
    job_entry: TrainJob = field(default_factory=TrainJob)  # in the run record at the start of the attempt
    bad_nodes: list[str] = field(default_factory=list)  # the run's, at the start of the attempt
    checkpoint_at_start: int | None = None
    preflight_failed_nodes: list[str] = field(default_factory=list)
    ray_step_started: float | None = None
    wanted: Wanted | None = None  # the operator's wish, read when a notice came
    slurm_end: str | None = None  # `requeue.slurm_end_of` after a SIGTERM or the Ray step's failure
    hang_detected_at: float | None = None
    hang_dumps: str | None = None  # the folder of the hang's stack dumps
    requeued: bool = False  # asked Slurm to requeue the job (the job folder and token are then kept)
    restart: Decision | None = None  # set when this attempt ends in a restart in the job (the caller runs it)


def time_left_s(info: dict[str, str], job_end_time: str | None = None, now: float | None = None) -> float | None:
    """Seconds left of the job's time limit (`scontrol show job`: TimeLimit - RunTime); None when unlimited or
    unknown. Not EndTime: a scancel sets it to now too (22.05: COMPLETING, Reason=None), so it cannot tell a cancel
    from the time limit.

    When scontrol gave no answer (`info` without TimeLimit), the job's own SLURM_JOB_END_TIME (`job_end_time`, epoch
    seconds; Slurm 23.02 and later) at `now` serves instead. It is only the fallback: Slurm fixes it when the job
    starts, so after a `scontrol update TimeLimit=...` it is wrong and the controller's answer is right."""
    if "TimeLimit" in info:
        limit, run = reported_seconds(info.get("TimeLimit")), reported_seconds(info.get("RunTime"))
        return float(limit - run) if limit is not None and run is not None else None
    if job_end_time and job_end_time.strip().isdigit() and now is not None:
        return float(int(job_end_time) - now)
    return None


def slurm_end_of_job(info: dict[str, str], restart_count: int) -> str | None:
    """`requeue.slurm_end_of` over the job's `scontrol show job`, for the attempt `restart_count` of the job."""
    restarts = info.get("Restarts", "0")
    return slurm_end_of(
        job_state=info.get("JobState", ""),
        restarts=int(restarts) if restarts.isdigit() else 0,
        restart_count=restart_count,
        preempt_time=info.get("PreemptTime", ""),
        time_left_s=time_left_s(info),
        reason=info.get("Reason", ""),
    )


def notice_missed_at_start(time_left: float | None, signal_before_s: float) -> bool:
    """Whether an attempt starting with `time_left` of its limit is inside the notice lead, so Slurm has sent the
    time-limit notice already (up to NOTICE_EARLY_S before `signal_before_s`)."""
    return time_left is not None and time_left <= signal_before_s + NOTICE_EARLY_S


def bad_nodes_to_avoid(state: AttemptState) -> list[str]:
    """The run's bad nodes this attempt landed on, when it should requeue without them: only the allocation's first
    Ray step (an in-job restart chooses its nodes) and once per job; else none."""
    landed = sorted(set(state.step_nodes) & set(state.bad_nodes))
    return [] if state.job_entry.avoided_bad_nodes or state.in_job else landed


def save_grace_s(wanted: Wanted | None, grace_s: float) -> float:
    """How long to wait for the save on a notice: the operator's timeout when the verb set one, else `grace_s`."""
    return float(wanted.timeout_s or grace_s) if wanted else grace_s


def save_reason(notice: str, wanted: Wanted | None, relayed: bool) -> str:
    """Why the trainer is asked to save (`notice.request_save`): the operator's verb, the preemption's SIGTERM the Ray
    head relayed as USR1 (`relayed`: its record exists), or the signal itself."""
    if wanted:
        return f"beam-slurm {wanted.action} by {wanted.by or '?'}"
    if relayed and notice == "SIGUSR1":
        return "the preemption's SIGTERM to the tasks, relayed by the Ray head"
    return f"{notice} (time limit or preemption)"


def failure_reason(failure: dict[str, object] | None, ckpt_path: str, usage: tuple[int, int] | None) -> str:
    """The recorded failure's reason; for full storage with what the checkpoint folder has left (`usage`: free and
    total bytes, None when unknown)."""
    if not failure:
        return ""
    reason = str(failure.get("reason", ""))
    if failure.get("kind") == "storage":
        reason += f"; checkpoint storage {ckpt_path}"
        if usage is not None:
            reason += f": {usage[0] / 2**20:.1f} MiB free of {usage[1] / 2**20:.1f} MiB"
    return reason


def decision_summary(decision: Decision) -> str:
    """The decision as the run record's attempt entry names it."""
    if decision.already_requeued:
        return "requeued by Slurm"
    if decision.restart_in_job:
        return "restart in job"
    return "requeue" if decision.requeue else f"end ({decision.exit_status})"


def bad_node_reasons(
    decision: Decision, failure_node: str | None, failure: dict[str, object] | None
) -> list[tuple[str, str]]:
    """Each bad node of the decision with why, for the run's bad-node list: the recorded failure's reason for the node
    it names, else the decision's."""
    default = "preflight failed there" if decision.end_kind == "preflight" else decision.reason
    failed_there = str((failure or {}).get("reason", "node failure"))
    return [(node, failed_there if node == failure_node else default) for node in decision.bad_nodes]


def outcome_reason(outcome: str | None, checkpoint: int | None, reason: str) -> str:
    """The job's outcome as the run record tells it: finished or stopped at the newest checkpoint, else `reason`."""
    at = f" at step {checkpoint}" if checkpoint is not None else ""
    reasons = {"completed": f"finished{at}", "stopped": f"stopped{at or ' before any checkpoint'}, resumable"}
    return reasons.get(outcome or "", reason)
