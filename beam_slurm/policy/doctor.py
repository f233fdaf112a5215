"""`beam-slurm doctor`'s verdicts: for each thing this toolkit relies on, what the site's configuration says of it, what
that means for a run of the recipe, and the fix (a site setting to ask the administrators for, or a recipe key).

Pure: each check reads `SiteFacts` (beam_slurm.slurm.site, which answers what differs between Slurm releases) and the
loaded recipe. A check's `value` is the setting in Slurm's own words (`KillWait=10 sec`), so it can be compared with
what `scontrol show config` prints."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from beam_slurm.policy.notice_budget import SaveCost, term_notice
from beam_slurm.policy.sizing import CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE, checkpoints_kept, node_needs
from beam_slurm.slurm.site import SiteFacts, StorageFacts
from beam_slurm.slurm.values import describe_seconds, reported_seconds, time_limit_seconds

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig

Verdict = Literal["ok", "degraded", "broken"]
VERDICTS: tuple[Verdict, ...] = ("ok", "degraded", "broken")  # from best to worst
REQUEUE_HOLD_DEGRADED_S = 300  # a credential window above this keeps every requeued attempt waiting for minutes
STAGE_JOBS = 3  # what `submit` queues for one run besides its evaluations: data, container, training
_MB = 1024**2
_TB = 1000**4


@dataclass(frozen=True)
class Check:
    """One row of doctor: the setting, its verdict for this recipe, what it means for a run, and the fix."""

    name: str  # snake case, the setting's name: `kill_wait`
    value: str  # the setting as Slurm (or the file it comes from) says it
    verdict: Verdict
    meaning: str
    fix: str = ""  # empty when there is nothing to change


def worst(checks: Sequence[Check]) -> Verdict:
    """The worst verdict of `checks` ('ok' for none)."""
    return max((c.verdict for c in checks), key=VERDICTS.index, default="ok")


def exit_status(checks: Sequence[Check]) -> int:
    """1 when any check is broken, else 0."""
    return 1 if worst(checks) == "broken" else 0


def slurm_version(site: SiteFacts, cfg: BeamConfig) -> Check:
    version = site.version
    clients = (
        f" (this host's clients: {site.client_release})"
        if site.client_release and site.client_release != version
        else ""
    )
    notes = []
    if site.spank_failure_fails_step and cfg.container.runtime == "pyxis":
        notes.append(
            "a failing SPANK plugin (pyxis: an image it cannot start) fails the Ray step and srun returns 1: the "
            "attempt ends as an infrastructure failure"
        )
    if not site.job_end_time_in_env:
        return Check(
            "slurm_version",
            version,
            "degraded",
            f"Slurm {version}{clients}, before 23.02: no SLURM_JOB_END_TIME in the job's environment (the job asks "
            f"the controller for its time left, and knows nothing while the controller does not answer); "
            f"MaxBatchRequeue is fixed at 5; --no-kill jobs that lost a node may not start steps on all that is left",
            "ask the administrators for Slurm 23.02 or later",
        )
    return Check(
        "slurm_version",
        version,
        "ok",
        "; ".join([f"Slurm {version}{clients}: SLURM_JOB_END_TIME in the job's environment", *notes]),
    )


def preempt_notice(site: SiteFacts, cfg: BeamConfig) -> Check:
    info, qos = site.preemption, cfg.cluster.qos
    where = f"partition {site.partition_name}" + (f", QOS {qos or 'normal'}" if info.by_qos else "")
    signal = site.user_signal_given or "no user signal"
    head = f"PreemptType={info.preempt_type}"
    if info.by_qos and site.qos_unread:
        return Check(
            "preempt_notice",
            head,
            "degraded",
            f"preemption is by QOS, but the QOS could not be read ({site.qos_unread}): how a preemption reaches "
            "the job is not known",
            "run doctor again once sacctmgr answers",
        )
    by_tier = info.preempt_type.endswith("/partition_prio")
    if not info.preemptable(qos) or (by_tier and not site.higher_tiers):
        mode = info.mode(qos) or "OFF"
        why = "no partition of a higher PriorityTier shares its nodes" if info.preemptable(qos) else "nothing preempts"
        return Check("preempt_notice", f"{head}, PreemptMode={mode}", "ok", f"{where}: not preemptable ({why})")
    mode, grace = info.mode(qos), info.grace_s(qos)
    if by_tier:
        where += f" (preempted by jobs of {', '.join(site.higher_tiers)})"
    value = f"{head}, PreemptMode={mode}, GraceTime={grace}, {signal}"
    cost = SaveCost.of(cfg)
    budget = cost.preemption_budget(grace)
    need = math.ceil(budget.step_s + budget.save_s)
    ask = (
        f"ask the administrators for PreemptMode=REQUEUE on partition {site.partition_name} with GraceTime >= "
        f"{need} and {site.user_signal_setting}, or set cluster.partition to a partition nobody preempts"
    )
    lost = f"up to {cfg.checkpoint.interval} steps (checkpoint.interval) are lost per preemption"
    if mode.startswith("SUSPEND"):
        return Check(
            "preempt_notice",
            value,
            "degraded",
            f"{where}: a preemption suspends the job: its GPUs stay held and Ray's and NCCL's timeouts may end the "
            "run on resume",
            ask,
        )
    if mode.startswith("CANCEL"):
        return Check(
            "preempt_notice",
            value,
            "broken",
            f"{where}: a preemption cancels the job instead of requeueing it: the run stops until it is submitted "
            f"again" + ("" if grace > 0 and site.user_signal_given else f", and {lost}"),
            ask,
        )
    if grace <= 0:
        return Check(
            "preempt_notice",
            value,
            "broken",
            f"{where}: GraceTime 0: a preemption kills the job at once, no save on notice; {lost}",
            ask + f"; or a smaller checkpoint.interval (now {cfg.checkpoint.interval})",
        )
    if not site.user_signal_given:
        saves, why = term_notice(info, qos, cost)
        if not saves:
            return Check(
                "preempt_notice",
                value,
                "broken",
                f"{where}: without the user signal the first SIGTERM reaches only the job's tasks, and the step and "
                f"the save do not fit the GraceTime ({why}): the Ray step stops at once; {lost}",
                ask,
            )
        caveat = (
            f"; with {info.proctrack} that SIGTERM may reach Ray's own processes too, and then nothing is saved"
            if "cgroup" in info.proctrack
            else ""
        )
        return Check(
            "preempt_notice",
            value,
            "degraded",
            f"{where}: without the user signal the first SIGTERM reaches only the job's tasks; the Ray step holds "
            f"it and relays it as a notice, because the step and the save fit ({why}){caveat}",
            f"ask the administrators for {site.user_signal_setting}",
        )
    if not budget.fits:
        fixes = budget.fixes(
            bytes_per_node=cost.bytes_per_node,
            interval_steps=cfg.checkpoint.interval,
            lead_key=f"GraceTime of partition {site.partition_name}",
        )
        return Check(
            "preempt_notice",
            value,
            "degraded",
            f"{where}: USR1 reaches the batch shell at once, but {budget.summary().replace(' lead ', ' GraceTime ')}"
            f": the save is cut off and the next attempt resumes from the last periodic checkpoint ({lost})",
            "; or ".join(f for f in fixes if not f.startswith("no storage")),  # the rest say what to change
        )
    return Check(
        "preempt_notice",
        value,
        "ok",
        f"{where}: USR1 reaches the batch shell at once and the save fits: "
        f"{budget.summary().replace(' lead ', ' GraceTime ')}",
    )


def requeue_hold(site: SiteFacts, cfg: BeamConfig) -> Check:
    given = site.cred_expire_text
    value = given or f"cred_expire not set ({site.cred_expire_s} s: Slurm's default)"
    meaning = (
        f"a requeued job may start again {site.requeue_hold_s} s after its requeue (the job-credential window + 1 s): "
        f"each of up to {cfg.cluster.max_requeues} requeues (cluster.max_requeues) waits that long"
    )
    if site.cred_expire_s > REQUEUE_HOLD_DEGRADED_S:
        return Check(
            "requeue_hold",
            value,
            "degraded",
            meaning,
            "ask the administrators for a shorter AuthInfo cred_expire (Slurm's default is 120)",
        )
    return Check("requeue_hold", value, "ok", meaning)


def kill_wait(site: SiteFacts, cfg: BeamConfig) -> Check:
    seconds = site.seconds("KillWait")
    value = f"KillWait={site.setting('KillWait') or 'not printed'}"
    stop = cfg.cluster.stop_grace_s
    if seconds is None:
        return Check("kill_wait", value, "degraded", "KillWait not read: how long the Ray step has to stop is unknown")
    if seconds < stop:
        return Check(
            "kill_wait",
            value,
            "degraded",
            f"when Slurm ends the job (time limit, the end of a preemption's GraceTime, scancel) it SIGKILLs the Ray "
            f"step {seconds} s after SIGTERM, before the {stop} s it gets to stop (cluster.stop_grace_s): Ray's "
            "shutdown and the last copy of the logs are cut off",
            f"cluster.stop_grace_s={seconds}, or ask the administrators for KillWait >= {stop}",
        )
    return Check(
        "kill_wait",
        value,
        "ok",
        f"when Slurm ends the job the Ray step has {seconds} s after SIGTERM, its {stop} s (cluster.stop_grace_s) "
        "included",
    )


def min_job_age(site: SiteFacts, cfg: BeamConfig) -> Check:
    seconds = site.seconds("MinJobAge")
    value = f"MinJobAge={site.setting('MinJobAge') or 'not printed'}"
    if seconds == 0:
        return Check("min_job_age", value, "ok", "the controller never forgets a finished job")
    kept = f"the controller forgets a finished job {describe_seconds(seconds)} after it ends"
    if not site.accounting:
        return Check(
            "min_job_age",
            value,
            "degraded",
            f"{kept}, and there is no accounting (AccountingStorageType={site.setting('AccountingStorageType')}) "
            "for `status` to ask then: a finished job's state shows UNKNOWN",
            "ask the administrators for accounting (slurmdbd) or a longer MinJobAge",
        )
    return Check("min_job_age", value, "ok", f"{kept}; `status` then asks the accounting (sacct)")


def max_time(site: SiteFacts, cfg: BeamConfig) -> Check:
    text = site.partition.get("MaxTime", "")
    value = f"MaxTime={text}"
    most = reported_seconds(text)
    wanted_text = str(cfg.cluster.time_limit)
    wanted = time_limit_seconds(wanted_text)
    if most is not None and (wanted is None or wanted > most):
        refused = site.setting("EnforcePartLimits").upper() not in ("", "NO")
        fate = "sbatch refuses it" if refused else "Slurm keeps it pending for ever (PartitionTimeLimit)"
        return Check(
            "max_time",
            value,
            "broken",
            f"the training job asks for {wanted_text} ({describe_seconds(wanted)}), over partition "
            f"{site.partition_name}'s {describe_seconds(most)}: {fate}",
            f"cluster.time_limit to at most {describe_seconds(most)}, or another cluster.partition",
        )
    within = (
        f"partition {site.partition_name} has no MaxTime"
        if most is None
        else f"within partition {site.partition_name}'s {describe_seconds(most)}"
    )
    return Check("max_time", value, "ok", f"cluster.time_limit={wanted_text} ({describe_seconds(wanted)}): {within}")


def default_time(site: SiteFacts, cfg: BeamConfig) -> Check:
    text = site.partition.get("DefaultTime", "")
    return Check(
        "default_time",
        f"DefaultTime={text}",
        "ok",
        f"every job this toolkit queues names its own limit (training: cluster.time_limit={cfg.cluster.time_limit}; "
        f"evaluations: eval.launcher.timeout_min={cfg.eval.launcher.timeout_min}), so the partition's default "
        "applies to none of them",
    )


def job_requeue(site: SiteFacts, cfg: BeamConfig) -> Check:
    text = site.setting("JobRequeue")
    value = f"JobRequeue={text or 'not printed'}"
    budget = (
        f"the job requeues itself at most {cfg.cluster.max_requeues} times (cluster.max_requeues)"
        if cfg.cluster.max_requeues
        else "cluster.max_requeues=0: the job never requeues itself"
    )
    if text == "0":
        return Check(
            "job_requeue",
            value,
            "ok",
            f"batch jobs are not requeueable unless they ask; the training and evaluation scripts ask (--requeue), "
            f"so node failures and preemptions requeue them; {budget}",
        )
    return Check(
        "job_requeue", value, "ok", f"batch jobs are requeueable (the training script asks anyway: --requeue); {budget}"
    )


def max_batch_requeue(site: SiteFacts, cfg: BeamConfig) -> Check:
    most = site.max_batch_requeue
    counts = (
        "it counts only the requeues after a failed launch of the batch script (a node that cannot start it, a "
        f"failing prolog), not this toolkit's own (at most cluster.max_requeues={cfg.cluster.max_requeues}) nor "
        "those after a node failure"
    )
    if most < 1:
        return Check(
            "max_batch_requeue",
            site.max_batch_requeue_text,
            "degraded",
            f"one failed launch holds the job (JobHeldAdmin) until someone releases it; {counts}",
            "ask the administrators for MaxBatchRequeue >= 1 (Slurm's default is 5)",
        )
    return Check(
        "max_batch_requeue",
        site.max_batch_requeue_text,
        "ok",
        f"Slurm holds the job (JobHeldAdmin) after {most} failed launches in a row; {counts}",
    )


def no_kill_shrink(site: SiteFacts, cfg: BeamConfig) -> Check:
    value = f"SLURM_VERSION={site.version}"
    allocation = cfg.cluster.nodes + cfg.cluster.spare_nodes
    if allocation < 2:
        return Check(
            "no_kill_shrink",
            value,
            "ok",
            "one node: a node failure ends the job (Slurm requeues it); there is nothing to shrink",
        )
    booting = (
        " (power saving boots nodes for jobs here: ResumeProgram is set)"
        if site.setting("ResumeProgram") not in ("", "(null)")
        else ""
    )
    how = (
        "--no-kill: Slurm removes a failed node from the job and keeps it running on the others (SIGKILLing the "
        f"running step), unless the job is still CONFIGURING, its nodes booting{booting}; the batch shell then "
        f"restarts Ray there (cluster.max_in_job_attempts={cfg.cluster.max_in_job_attempts}). "
        "SchedulerParameters=disable_job_shrink does not stop it"
    )
    if not site.no_kill_keeps_resources and cfg.cluster.max_in_job_attempts > 0:
        return Check(
            "no_kill_shrink",
            value,
            "degraded",
            f"{how}; before Slurm 23.02.3 a step started after the loss may not get all of what is left, so the "
            "in-job restart can fail and the job requeues instead",
            "ask the administrators for Slurm 23.02.3 or later; or cluster.max_in_job_attempts=0 (every node "
            "failure requeues)",
        )
    return Check("no_kill_shrink", value, "ok", how)


def accounting_enforce(site: SiteFacts, cfg: BeamConfig) -> Check:
    value = f"AccountingStorageEnforce={site.setting('AccountingStorageEnforce') or 'not printed'}"
    if not site.limits_enforced:
        return Check(
            "accounting_enforce",
            value,
            "ok",
            "QOS and association limits are not enforced: no job waits on them, and `plan` and `submit` do not "
            "read them",
        )
    return Check(
        "accounting_enforce",
        value,
        "ok",
        "QOS and association limits apply: a job over one waits for ever (sbatch --test-only refuses it only with "
        "the QOS flag DenyOnLimit), so `plan` and `submit` read those limits themselves",
    )


def gres(site: SiteFacts, cfg: BeamConfig) -> Check:
    value = f"GresTypes={site.setting('GresTypes') or 'not printed'}"
    wanted = cfg.cluster.gpus_per_node
    types = site.setting("GresTypes").split(",")
    if wanted and "gpu" not in types:
        return Check(
            "gres",
            value,
            "broken",
            f"Slurm schedules no GPUs (no gpu in GresTypes): the training job's --gpus-per-node={wanted} is refused",
            "ask the administrators for GresTypes=gpu with each node's Gres=gpu:N; or cluster.gpus_per_node=0 on "
            "CPU-only nodes",
        )
    if not wanted:
        return Check("gres", value, "ok", "cluster.gpus_per_node=0: the jobs ask for no GPUs")
    return Check("gres", value, "ok", "Slurm schedules GPUs as generic resources (--gpus-per-node)")


def gpus_per_node(site: SiteFacts, cfg: BeamConfig) -> Check:
    nodes = site.nodes
    if not nodes:
        return Check(
            "gpus_per_node",
            "no nodes",
            "broken",
            f"partition {site.partition_name} has no nodes: nothing can start",
            "another cluster.partition",
        )
    shapes: dict[str, int] = {}
    for node in nodes:
        shapes[node.gres] = shapes.get(node.gres, 0) + 1
    value = ", ".join(f"Gres={g}" + (f" ({n} nodes)" if len(shapes) > 1 else "") for g, n in shapes.items())
    wanted, allocation = cfg.cluster.gpus_per_node, cfg.cluster.nodes + cfg.cluster.spare_nodes
    fitting = [n for n in nodes if n.gpus >= wanted]
    if len(fitting) < allocation:
        return Check(
            "gpus_per_node",
            value,
            "broken",
            f"the job asks for {allocation} nodes with {wanted} GPUs each (cluster.nodes + cluster.spare_nodes, "
            f"cluster.gpus_per_node); partition {site.partition_name} has {len(fitting)} such nodes: Slurm refuses "
            "it (Requested node configuration is not available)",
            f"cluster.gpus_per_node={max(n.gpus for n in nodes)} or fewer cluster.nodes, or another cluster.partition",
        )
    most = min(n.gpus for n in fitting)
    if wanted and most > wanted:
        return Check(
            "gpus_per_node",
            value,
            "degraded",
            f"the job uses {wanted} of at least {most} GPUs per node; it holds whole nodes (--exclusive), so the "
            "rest stay idle",
            f"cluster.gpus_per_node={most}",
        )
    return Check(
        "gpus_per_node",
        value,
        "ok",
        f"{len(fitting)} nodes of partition {site.partition_name} have the {wanted} GPUs the job asks for per node "
        f"({allocation} nodes)",
    )


def local_disk(site: SiteFacts, cfg: BeamConfig) -> Check:
    tmp = min((n.tmp_disk_mb for n in site.nodes), default=0)
    tmp_fs = site.setting("TmpFS") or "/tmp"
    value = f"TmpDisk={tmp}, TmpFS={tmp_fs}"
    needs = node_needs(cfg)
    if needs.host_ram_bytes:
        memory = min((n.real_memory_mb for n in site.nodes), default=0) * _MB
        verdict: Verdict = "degraded" if memory and memory < needs.host_ram_bytes else "ok"
        return Check(
            "local_disk",
            value,
            verdict,
            f"paths.optimizer_state_disk_dir is not set: the optimizer state stays in host memory "
            f"(~{CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE} TB per node; the nodes' RealMemory is {memory / _TB:.2f} TB)",
            "" if verdict == "ok" else "paths.optimizer_state_disk_dir on each node's local NVMe",
        )
    if not needs.scratch_bytes:
        why = "the rehearsal trainer" if cfg.trainer.backend == "rehearsal" else f"LoRA rank {cfg.lora.rank}"
        return Check(
            "local_disk", value, "ok", f"{why}: no optimizer state on node-local disk (it is small and saved whole)"
        )
    need = f"{needs.scratch_bytes / _TB:.2f} TB of optimizer state per training node"
    folder = str(cfg.paths.optimizer_state_disk_dir)
    under_tmp = folder == tmp_fs or folder.startswith(tmp_fs.rstrip("/") + "/")
    if not tmp or not under_tmp:
        said = "Slurm was not told the nodes' local disk (TmpDisk=0)" if not tmp else f"TmpDisk is {tmp_fs}'s size"
        return Check(
            "local_disk",
            value,
            "degraded",
            f"{need} at {folder} (paths.optimizer_state_disk_dir); {said}, so it says nothing of that folder: the "
            "job's preflight checks the free space on every node",
            "ask the administrators to set TmpDisk (and TmpFS) for the node-local NVMe",
        )
    if tmp * _MB < needs.scratch_bytes:
        return Check(
            "local_disk",
            value,
            "broken",
            f"{need} at {folder}; the nodes have {tmp * _MB / _TB:.2f} TB there",
            "more training nodes (cluster.nodes: the state is split over them), or paths.optimizer_state_disk_dir "
            "on a larger disk",
        )
    return Check("local_disk", value, "ok", f"{need} at {folder}; the nodes have {tmp * _MB / _TB:.2f} TB there")


FLOCK_ACROSS_NODES = ("nfs", "nfs4", "gpfs", "ceph", "cephfs", "wekafs")
LOCAL_FILE_SYSTEMS = ("ext4", "ext3", "xfs", "btrfs", "zfs", "tmpfs", "overlay")


def _lock_reach(storage: StorageFacts) -> tuple[Verdict, str]:
    """What fcntl.flock holds on this file system: a verdict and a sentence. This toolkit's own lock
    (core/shared_lock.py: link and rename) holds across nodes everywhere; other tools' flock may not."""
    fs, options = storage.fs_type, storage.options
    ours = "this toolkit's own locks (link and rename) hold across nodes"
    if fs == "lustre":
        if "flock" in options:
            return "ok", f"Lustre mounted with flock: fcntl.flock holds across nodes, and {ours}"
        how = "localflock: fcntl.flock holds on one node only" if "localflock" in options else "no flock: it fails"
        return "degraded", (
            f"Lustre with {how}; {ours}, but tools that lock a shared cache with flock (Hugging Face's filelock, "
            "torch's compile cache) race across nodes"
        )
    if fs == "beegfs":
        return "degraded", (
            f"BeeGFS: fcntl.flock holds on one node only unless its clients set tuneUseGlobalFileLocks; {ours}, but "
            "tools that lock a shared cache with flock race across nodes"
        )
    if fs.startswith("nfs"):
        if any(o in ("local_lock=flock", "local_lock=all", "nolock") for o in options):
            return "degraded", f"NFS with local locks: fcntl.flock holds on one node only; {ours}"
        return "ok", f"NFS: fcntl.flock becomes an NFS lock and holds across nodes; {ours}"
    if fs in FLOCK_ACROSS_NODES:
        return "ok", f"{fs}: fcntl.flock holds across nodes; {ours}"
    if fs in LOCAL_FILE_SYSTEMS:
        return "degraded", (
            f"a local file system of this host ({fs}): the other nodes see these files only if they share its disk "
            "(the job's preflight checks that every node sees the same folder); locks hold on this host only"
        )
    return "degraded", f"{fs}: not known here; {ours}, other tools' fcntl.flock may not"


def checkpoint_filesystem(site: SiteFacts, cfg: BeamConfig) -> Check:
    folders = {"paths.ckpt_path": cfg.paths.ckpt_path, "paths.export_path": cfg.paths.export_path}
    found = {key: s for key, path in folders.items() for s in site.storage if path and s.path == path}
    if not found:
        return Check(
            "checkpoint_filesystem",
            "not read",
            "degraded",
            "the file systems under paths.ckpt_path and paths.export_path could not be read on this host",
        )
    rows = [(key, s, *_lock_reach(s)) for key, s in found.items()]
    same = len({s.mount_point for _, s, _, _ in rows}) == 1
    value = rows[0][1].source if same else "; ".join(f"{key}: {s.source}" for key, s, _, _ in rows)
    verdict = max((v for _, _, v, _ in rows), key=VERDICTS.index)
    meaning = rows[0][3] if same else "; ".join(f"{key}: {m}" for key, _, _, m in rows)
    fix = "" if verdict == "ok" else "keep shared caches (HF_HOME, ...) off this file system, or ask for flock there"
    if any(s.fs_type in LOCAL_FILE_SYSTEMS for _, s, _, _ in rows):
        fix = "paths.ckpt_path and paths.export_path on storage every node mounts" if cfg.cluster.nodes > 1 else ""
    return Check("checkpoint_filesystem", value, verdict, meaning, fix)


def _evaluation_tasks(cfg: BeamConfig) -> int:
    """Tasks of the run's evaluation array: one per checkpoint the run keeps."""
    return checkpoints_kept(cfg)


def max_array_size(site: SiteFacts, cfg: BeamConfig) -> Check:
    size = site.number("MaxArraySize")
    cap = site.scheduler_parameter("max_array_tasks")
    value = f"MaxArraySize={site.setting('MaxArraySize') or 'not printed'}" + (
        f", max_array_tasks={cap}" if cap else ""
    )
    tasks = _evaluation_tasks(cfg)
    parallel = cfg.eval.launcher.array_parallelism
    if size == 0:
        return Check(
            "max_array_size",
            value,
            "broken",
            "job arrays are disabled: `evaluate` submits its tasks as one",
            "ask the administrators for MaxArraySize > 0",
        )
    most = min([n for n in (size, int(cap) if cap and cap.isdigit() else None) if n is not None], default=None)
    if most is not None and tasks > most:
        return Check(
            "max_array_size",
            value,
            "degraded",
            f"evaluating every checkpoint the run keeps is an array of {tasks} tasks, over the {most} Slurm takes: "
            "sbatch refuses it",
            f"evaluate at most {most} checkpoints at once (--checkpoint-list), or checkpoint.max_to_keep={most}",
        )
    return Check(
        "max_array_size",
        value,
        "ok",
        f"an evaluation of every checkpoint the run keeps is an array of {tasks} tasks, at most {parallel} at once "
        "(eval.launcher.array_parallelism)",
    )


def max_submit_jobs(site: SiteFacts, cfg: BeamConfig) -> Check:
    name = cfg.cluster.qos or "normal"
    jobs = STAGE_JOBS + _evaluation_tasks(cfg)
    asked = f"one run queues up to {jobs} jobs ({STAGE_JOBS} stages and {_evaluation_tasks(cfg)} evaluation tasks)"
    if not site.accounting:
        return Check("max_submit_jobs", "no accounting", "ok", f"no QOS limits without accounting; {asked}")
    if site.qos_unread:
        return Check(
            "max_submit_jobs",
            "not read",
            "degraded",
            f"QOS {name}'s job limits could not be read ({site.qos_unread})",
            "run doctor again once sacctmgr answers",
        )
    qos = site.qos_named(cfg.cluster.qos)
    if qos is None:
        return Check("max_submit_jobs", f"QOS {name}: not found", "ok", f"sacctmgr lists no QOS {name}; {asked}")
    limits = {
        "MaxSubmitJobsPerUser": qos.max_submit_per_user,
        "MaxSubmitJobsPerAccount": qos.max_submit_per_account,
        "GrpSubmitJobs": qos.grp_submit,
    }
    value = f"QOS {name}: " + ", ".join(f"{k}={'' if v is None else v}" for k, v in limits.items())
    set_limits = {k: v for k, v in limits.items() if v is not None}
    if not set_limits:
        return Check(
            "max_submit_jobs", value, "ok", f"no limit on queued jobs; {asked} (a sweep queues that many per point)"
        )
    if not site.limits_enforced:
        return Check("max_submit_jobs", value, "ok", f"not enforced (AccountingStorageEnforce has no limits); {asked}")
    most = min(set_limits.values())
    if jobs > most:
        return Check(
            "max_submit_jobs",
            value,
            "degraded",
            f"{asked}, over the {most} the QOS takes (each array task counts): sbatch refuses what is over "
            "(QOSMaxSubmitJobPerUserLimit)",
            "evaluate fewer checkpoints at once (--checkpoint-list), checkpoint.max_to_keep, or another cluster.qos",
        )
    return Check(
        "max_submit_jobs",
        value,
        "ok",
        f"{asked}, within the {most} the QOS takes; a sweep of more than {most // jobs} points is not",
    )


def container_runtime(site: SiteFacts, cfg: BeamConfig) -> Check:
    runtime = cfg.container.runtime
    if runtime == "none":
        return Check("container_runtime", "container.runtime=none", "ok", "no container: the jobs run on the host")
    if runtime == "apptainer":
        found = site.programs.get("apptainer") or site.programs.get("singularity")
        if not found:
            return Check(
                "container_runtime",
                "apptainer: not on PATH here",
                "degraded",
                "container.runtime=apptainer, but no apptainer (or singularity) on this host's PATH: the nodes need "
                "it (the container stage and the jobs run it there)",
                "load the module that provides apptainer (cluster.setup), or ask the administrators",
            )
        return Check("container_runtime", f"apptainer: {found}", "ok", "container.runtime=apptainer: found on PATH")
    where = f"PlugStackConfig={site.plugstack_path}"
    if site.plugstack_text is None:
        return Check(
            "container_runtime",
            f"{where} (unreadable)",
            "degraded",
            f"container.runtime=pyxis, but the SPANK plugin list could not be read ({site.plugstack_why})",
            "ask the administrators whether pyxis is installed",
        )
    enroot = site.programs.get("enroot", "")
    value = (
        f"{where}: "
        + ("spank_pyxis.so" if site.pyxis_listed else "no pyxis")
        + (f"; enroot: {enroot}" if enroot else "; enroot: not on PATH here")
    )
    if not site.pyxis_listed:
        return Check(
            "container_runtime",
            value,
            "broken",
            "container.runtime=pyxis, but pyxis is not among Slurm's SPANK plugins: srun refuses --container-image",
            "container.runtime=apptainer (or none), or ask the administrators for pyxis and enroot",
        )
    failing = (
        "; a pyxis failure (an image it cannot start) fails the Ray step (srun returns 1)"
        if site.spank_failure_fails_step
        else ""
    )
    return Check(
        "container_runtime",
        value,
        "ok",
        f"container.runtime=pyxis: pyxis is a SPANK plugin of this cluster (enroot must be on every node){failing}",
    )


CHECKS: tuple[Callable[[SiteFacts, BeamConfig], Check], ...] = (
    slurm_version,
    preempt_notice,
    requeue_hold,
    kill_wait,
    min_job_age,
    max_time,
    default_time,
    job_requeue,
    max_batch_requeue,
    no_kill_shrink,
    accounting_enforce,
    gres,
    gpus_per_node,
    local_disk,
    checkpoint_filesystem,
    max_array_size,
    max_submit_jobs,
    container_runtime,
)
"""Every check, in the order doctor prints them."""


def checks(site: SiteFacts, cfg: BeamConfig) -> list[Check]:
    """Every check's verdict for this recipe on this site."""
    return [check(site, cfg) for check in CHECKS]


def profile_values(site: SiteFacts, measured_at: str) -> dict[str, object]:
    """What the configuration alone tells a site profile (`doctor --write`): dotted recipe key -> value."""
    return {
        "cluster.partition": site.partition_name,
        "site.measured_at": measured_at,
        "site.slurm_version": site.version,
        "site.requeue_hold_s": float(site.requeue_hold_s),
    }
