"""How a preemption reaches a job on this cluster, read from Slurm itself (`plan`'s notice lines): `scontrol show
config`, `scontrol show partition -o` and `sacctmgr show qos`.

Seen on the sandbox (Slurm 22.05, GraceTime 20 s, KillWait 10 s): with preempt_send_user_signal and the job's
`--signal=B:USR1@N`, the batch shell gets USR1 at once (our notice, so the save has the grace time); at its end the
batch shell and the tasks get SIGTERM, SIGKILL KillWait later. Without it the first SIGTERM reaches only the job's
tasks, our Ray step on every node (with proctrack/linuxproc not Ray's daemons, which left the process tree), not the
batch shell; when the save fits in the grace time the Ray step holds it and the head relays it as a notice
(`beam_slurm.policy.notice_budget.term_notice`). The grace time seen was 30 s for GraceTime=20: slurmctld checks the
new end
time on its own period. Slurm 24.11's sandbox (PreemptParameters=send_user_signal, the same partitions): USR1 at once,
the job requeued 33 s later."""

from __future__ import annotations

from dataclasses import dataclass, field

from beam_slurm.slurm import scheduler, values

QUERY_TIMEOUT_S = 10.0  # `plan` must not hang on a silent controller
USER_SIGNAL_PARAMETER = "preempt_send_user_signal"
"""SlurmctldParameters' name for "send the job's --signal on preemption" (22.05; still read by later releases)."""
PREEMPT_USER_SIGNAL_PARAMETER = "send_user_signal"
"""The same as PreemptParameters' entry, its place since 23.02 (what a 24.11 cluster sets)."""


@dataclass(frozen=True)
class QosPreemption:
    """One QOS's preemption settings (sacctmgr show qos)."""

    name: str
    preempts: tuple[str, ...]  # QOS names this one may preempt
    mode: str
    grace_s: int


@dataclass(frozen=True)
class PreemptionInfo:
    """How a preemption reaches jobs of one partition and QOS; `reachable` False: Slurm did not answer (`why`)."""

    reachable: bool
    why: str = ""
    preempt_type: str = ""  # preempt/none, preempt/partition_prio or preempt/qos
    cluster_mode: str = ""  # PreemptMode of slurm.conf (OFF, CANCEL, REQUEUE, SUSPEND, with GANG)
    # SlurmctldParameters=preempt_send_user_signal or PreemptParameters=send_user_signal: the job's --signal is sent
    user_signal: bool = False
    kill_wait_s: int = 0
    # What a signal to a step reaches: proctrack/cgroup every process, Ray's daemons too; linuxproc the tree they left.
    proctrack: str = ""
    partition: str = ""
    partition_mode: str = ""
    partition_grace_s: int = 0
    qos: tuple[QosPreemption, ...] = field(default_factory=tuple)

    @property
    def by_qos(self) -> bool:
        return self.preempt_type.endswith("/qos")

    def qos_of(self, name: str | None) -> QosPreemption | None:
        return next((q for q in self.qos if q.name == (name or "normal")), None)

    def preemptors(self, qos_name: str | None) -> list[str]:
        """QOS whose jobs may preempt jobs of `qos_name` (empty name: the default QOS `normal`)."""
        return [q.name for q in self.qos if (qos_name or "normal") in q.preempts]

    def mode(self, qos_name: str | None = None) -> str:
        """The effective preemption mode for a job of this partition (and QOS, for preempt/qos)."""
        if self.by_qos:
            q = self.qos_of(qos_name)
            if q is not None and q.mode and q.mode.upper() != "CLUSTER":
                return q.mode.upper()
            return self.cluster_mode.upper()
        return (self.partition_mode or self.cluster_mode).upper()

    def grace_s(self, qos_name: str | None = None) -> int:
        if self.by_qos:
            return getattr(self.qos_of(qos_name), "grace_s", 0)
        return self.partition_grace_s

    def preemptable(self, qos_name: str | None = None) -> bool:
        if (
            not self.reachable
            or self.preempt_type in ("", "preempt/none")
            or (self.by_qos and not self.preemptors(qos_name))
        ):
            return False
        return not self.mode(qos_name).startswith("OFF")


def parse_qos(text: str) -> tuple[QosPreemption, ...]:
    """`sacctmgr -n -P show qos format=Name,Preempt,PreemptMode,GraceTime` rows."""
    rows = (line.split("|") for line in text.splitlines())
    return tuple(
        QosPreemption(
            name=row[0], preempts=tuple(p for p in row[1].split(",") if p), mode=row[2], grace_s=_seconds(row[3])
        )
        for row in rows
        if len(row) >= 4 and row[0]
    )


def _seconds(text: str) -> int:
    return values.reported_seconds(text) or 0


def from_outputs(config: str, partitions: str, qos: str, partition: str | None) -> PreemptionInfo:
    """Build the picture from the three commands' outputs (pure; tests feed it recorded text)."""
    conf = scheduler.parse_config(config)
    rows = scheduler.parse_partitions(partitions)
    if partition and "," in partition:  # a list: the job runs in the first that can start it; read that one
        partition = values.partition_names(partition)[0]
    if partition:
        row = next((r for r in rows if r.get("PartitionName") == partition), None)
        if row is None:
            return PreemptionInfo(reachable=False, why=f"Slurm has no partition {partition!r} (cluster.partition)")
    else:
        row = next((r for r in rows if r.get("Default") == "YES"), rows[0] if rows else {})
    params = [p.strip() for p in conf.get("SlurmctldParameters", "").split(",")]
    preempt_params = [p.strip() for p in conf.get("PreemptParameters", "").split(",")]
    return PreemptionInfo(
        reachable=True,
        preempt_type=conf.get("PreemptType", ""),
        cluster_mode=conf.get("PreemptMode", ""),
        user_signal=USER_SIGNAL_PARAMETER in params or PREEMPT_USER_SIGNAL_PARAMETER in preempt_params,
        proctrack=conf.get("ProctrackType", ""),
        kill_wait_s=_seconds(conf.get("KillWait", "").split()[0] if conf.get("KillWait") else ""),
        partition=row.get("PartitionName", ""),
        partition_mode=row.get("PreemptMode", ""),
        partition_grace_s=_seconds(row.get("GraceTime", "")),
        qos=parse_qos(qos),
    )


def read_preemption(partition: str | None = None) -> PreemptionInfo:
    """Ask Slurm; `reachable=False` (with the reason) where Slurm cannot be reached, e.g. on a laptop."""
    try:
        config = scheduler.run(["scontrol", "show", "config"], timeout_s=QUERY_TIMEOUT_S)
        partitions = scheduler.run(["scontrol", "show", "partition", "-o"], timeout_s=QUERY_TIMEOUT_S)
    except scheduler.SlurmCommandError as exc:
        return PreemptionInfo(reachable=False, why=str(exc).splitlines()[0])
    qos = ""
    if scheduler.parse_config(config).get("PreemptType", "").endswith("/qos"):
        try:
            qos = scheduler.run(
                ["sacctmgr", "-n", "-P", "show", "qos", "format=Name,Preempt,PreemptMode,GraceTime"],
                timeout_s=QUERY_TIMEOUT_S,
            )
        except scheduler.SlurmCommandError as exc:
            return PreemptionInfo(reachable=False, why=f"preemption by QOS, but {str(exc).splitlines()[0]}")
    return from_outputs(config, partitions, qos, partition)
