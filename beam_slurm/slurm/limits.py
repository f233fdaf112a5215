"""What the cluster's own limits say of a job before it is queued: its partition's (`scontrol show partition`) and its
QOS's and association's (`sacctmgr`). `sbatch --test-only` repeats only the submit-time checks: a partition's MaxTime
and MaxNodes are refused there only with EnforcePartLimits, QOS and association limits only with
AccountingStorageEnforce=limits and DenyOnLimit. Elsewhere Slurm accepts a job that then waits for ever (Reason
PartitionTimeLimit, PartitionNodeLimit, QOSMaxWallDurationPerJobLimit, AssocMaxNodesPerJobLimit, ...): hence the limits
read here, QOS and association ones where the controller enforces them, only the user's own association."""

from __future__ import annotations

import contextlib
import getpass
import os
from dataclasses import dataclass

from beam_slurm.slurm import scheduler
from beam_slurm.slurm.submission import SbatchRequest, effective_options
from beam_slurm.slurm.values import (
    SlurmValueError,
    describe_seconds,
    partition_names,
    reported_seconds,
    time_limit_seconds,
)


@dataclass(frozen=True)
class JobShape:
    """What a job asks of Slurm, as sbatch reads it (`effective_options`)."""

    nodes: int
    gpus_per_node: int
    time_limit_s: int | None  # None: no limit (UNLIMITED)
    time_limit_text: str
    time_limit_given: bool  # False: none named, so the partition's DefaultTime (else its MaxTime)
    time_setting: str  # what changes the time limit: cluster.time_limit, else the variable or the header
    partitions: tuple[str, ...]  # () = the cluster's default partition
    qos: str
    account: str


def job_shape(request: SbatchRequest, environ=None) -> JobShape:
    """The shape of a rendered request: its command line, the SBATCH_* variables, then its script's header."""
    options = effective_options(request, environ)
    given = lambda name: options.get(name, ("", ""))[0]  # noqa: E731

    def number(name: str, default: int) -> int:
        with contextlib.suppress(ValueError):
            return int(given(name).split("-")[0]) if given(name) else default
        return default

    time_text, time_source = options.get("time", ("", ""))
    time_setting = {"the command line": "cluster.time_limit", "": "cluster.time_limit"}.get(
        time_source, f"SBATCH_TIMELIMIT (the time limit comes from {time_source})"
    )
    seconds: int | None = None
    partitions: tuple[str, ...] = ()
    with contextlib.suppress(SlurmValueError):
        seconds = time_limit_seconds(time_text) if time_text else None
    with contextlib.suppress(SlurmValueError):
        partitions = tuple(partition_names(given("partition"))) if given("partition") else ()
    return JobShape(
        nodes=number("nodes", 1),
        gpus_per_node=number("gpus-per-node", 0),
        time_limit_s=seconds,
        time_limit_text=time_text,
        time_limit_given=bool(time_text),
        time_setting=time_setting,
        partitions=partitions,
        qos=given("qos"),
        account=given("account"),
    )


@dataclass(frozen=True)
class PartitionLimits:
    """One partition's limits as scontrol prints them; None where it has none."""

    name: str
    max_time_s: int | None
    default_time_s: int | None
    max_nodes: int | None
    total_nodes: int
    state: str

    @classmethod
    def read(cls, partition: str = "") -> PartitionLimits:
        info = scheduler.partition_info(partition)
        max_nodes = info.get("MaxNodes", "UNLIMITED")
        return cls(
            name=info.get("PartitionName", partition),
            max_time_s=reported_seconds(info.get("MaxTime")),
            default_time_s=reported_seconds(info.get("DefaultTime")),
            max_nodes=int(max_nodes) if max_nodes.isdigit() else None,
            total_nodes=int(info.get("TotalNodes", "0") or 0),
            state=info.get("State", ""),
        )

    def describe(self) -> str:
        nodes = f"MaxNodes {self.max_nodes}" if self.max_nodes is not None else "no MaxNodes"
        return (
            f"MaxTime {describe_seconds(self.max_time_s)}, DefaultTime "
            f"{describe_seconds(self.default_time_s) if self.default_time_s else 'none'}, {nodes}, "
            f"{self.total_nodes} nodes, {self.state}"
        )


@dataclass(frozen=True)
class LimitBreach:
    """One limit a job breaks: what Slurm would say while it waits, and the setting that changes it."""

    text: str
    setting: str

    def __str__(self) -> str:
        return f"{self.text}; change {self.setting}"


def partition_breaches(shape: JobShape, limits: PartitionLimits) -> list[LimitBreach]:
    """Why the job would never start in this partition (empty: it fits)."""
    out = []
    where = f"partition {limits.name}"
    # A job that names no limit gets the partition's DefaultTime, else its MaxTime: never over it.
    if (
        shape.time_limit_given
        and limits.max_time_s is not None
        and (shape.time_limit_s is None or shape.time_limit_s > limits.max_time_s)
    ):
        most = describe_seconds(limits.max_time_s)
        out.append(
            LimitBreach(
                f"a time limit of {shape.time_limit_text} ({describe_seconds(shape.time_limit_s)}) "
                f"is over {where}'s MaxTime {most}: Slurm keeps the job pending for ever "
                "(PartitionTimeLimit)",
                f"{shape.time_setting} to at most {most}, or cluster.partition",
            )
        )
    if limits.max_nodes is not None and shape.nodes > limits.max_nodes:
        out.append(
            LimitBreach(
                f"{shape.nodes} nodes are over {where}'s MaxNodes {limits.max_nodes} (PartitionNodeLimit)",
                "cluster.nodes, or cluster.partition",
            )
        )
    elif limits.total_nodes and shape.nodes > limits.total_nodes:
        out.append(
            LimitBreach(
                f"{shape.nodes} nodes are more than {where} has ({limits.total_nodes})",
                "cluster.nodes, or cluster.partition",
            )
        )
    return out


def _tres(text: str) -> dict[str, int]:
    """'node=2,gres/gpu=16' -> {'node': 2, 'gres/gpu': 16} (values that are not whole numbers are left out)."""
    pairs = (part.partition("=") for part in (text or "").split(","))
    return {name.strip(): int(value) for name, sep, value in pairs if sep and value.isdigit()}


@dataclass(frozen=True)
class AccountingLimits:
    """Per-job limits of a QOS or an association (sacctmgr MaxWall and MaxTRES); None/{} where it has none."""

    owner: str  # 'QOS normal', 'association root/root', ...
    max_wall_s: int | None
    max_tres: dict[str, int]

    def breaches(self, shape: JobShape, reason_prefix: str, setting: str) -> list[LimitBreach]:
        out = []
        if (
            shape.time_limit_given
            and self.max_wall_s is not None
            and (shape.time_limit_s is None or shape.time_limit_s > self.max_wall_s)
        ):
            out.append(
                LimitBreach(
                    f"a time limit of {describe_seconds(shape.time_limit_s)} is over {self.owner}'s "
                    f"MaxWall {describe_seconds(self.max_wall_s)} ({reason_prefix}MaxWallDurationPerJob"
                    "Limit)",
                    f"{shape.time_setting} to at most {describe_seconds(self.max_wall_s)}, or {setting}",
                )
            )
        asked = {"node": shape.nodes, "gres/gpu": shape.nodes * shape.gpus_per_node}
        for name, value in asked.items():
            limit = self.max_tres.get(name)
            if limit is not None and value > limit:
                what = "nodes" if name == "node" else "GPUs"
                out.append(
                    LimitBreach(
                        f"{value} {what} are over {self.owner}'s MaxTRES {name}={limit} ({reason_prefix}MaxTRESPerJob)",
                        f"cluster.nodes, or {setting}",
                    )
                )
        return out


def association_limits(shape: JobShape, partition: str, user: str | None = None) -> tuple[AccountingLimits | None, str]:
    """The user's association for the job's account (the user's default account when it names none) and partition (a
    partition's own association first), and the job's QOS (its --qos, else the association's default, else 'normal')."""
    user = user or os.environ.get("USER") or getpass.getuser()
    fields = ("Account", "User", "Partition", "MaxWall", "MaxTRES", "DefaultQOS")
    rows = [r for r in scheduler.accounting_rows("assoc", fields, ["where", f"user={user}"]) if r["User"] == user]
    account = shape.account
    if not account:
        users = scheduler.accounting_rows("user", ("User", "DefaultAccount"), ["where", f"name={user}"])
        account = users[0]["DefaultAccount"] if users else ""
    rows = [r for r in rows if not account or r["Account"] == account]
    row = next((r for r in rows if r["Partition"] == partition), None) or next(
        (r for r in rows if not r["Partition"]), None
    )
    if row is None:
        return None, shape.qos or "normal"
    limits = AccountingLimits(
        f"association {row['Account']}/{user}", reported_seconds(row["MaxWall"]), _tres(row["MaxTRES"])
    )
    return limits, shape.qos or row["DefaultQOS"] or "normal"


def qos_limits(name: str) -> AccountingLimits | None:
    rows = scheduler.accounting_rows("qos", ("Name", "MaxWall", "MaxTRES"), ["where", f"name={name}"])
    row = next((r for r in rows if r["Name"] == name), None)
    return (
        None
        if row is None
        else AccountingLimits(f"QOS {name}", reported_seconds(row["MaxWall"]), _tres(row["MaxTRES"]))
    )


@dataclass
class LimitsAnswer:
    """What the limits say of a job: breaches (it would never start), partitions read, what was unread; never raises."""

    breaches: list[LimitBreach]
    partitions: list[PartitionLimits]
    unread: list[str]
    accounting_enforced: bool = False


def check_job(shape: JobShape) -> LimitsAnswer:
    """Limits the job breaks; of several partitions, those broken in each (Slurm starts it in the first that can)."""
    partitions: list[PartitionLimits] = []
    unread: list[str] = []
    for name in shape.partitions or ("",):
        try:
            partitions.append(PartitionLimits.read(name))
        except scheduler.SlurmCommandError as exc:
            unread.append(f"partition {name or '(default)'}: {exc}")
    per_partition = [partition_breaches(shape, limits) for limits in partitions]
    breaches: list[LimitBreach] = []
    if per_partition and all(per_partition):
        breaches += (
            per_partition[0]
            if len(per_partition) == 1
            else [
                LimitBreach(" and ".join(b.text for found in per_partition for b in found), per_partition[0][0].setting)
            ]
        )
    enforced = False
    try:
        # The controller applies QOS and association limits where AccountingStorageEnforce has limits or safe.
        enforced = any(w in scheduler.config_value("AccountingStorageEnforce").lower() for w in ("limits", "safe"))
        if enforced:
            partition = partitions[0].name if partitions else ""
            association, qos = association_limits(shape, partition)
            found_by = ((association, "Assoc", "cluster.account"), (qos_limits(qos), "QOS", "cluster.qos"))
            for found, prefix, setting in found_by:
                if found is not None:
                    breaches += found.breaches(shape, prefix, setting)
    except scheduler.SlurmCommandError as exc:
        unread.append(f"QOS and association limits: {exc}")
    return LimitsAnswer(breaches, partitions, unread, enforced)
