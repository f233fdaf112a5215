"""What a Slurm site is, as `beam-slurm doctor` reads it: the controller's running configuration (`scontrol show
config`), the partition a recipe uses and its nodes (`scontrol show partition -o`, `scontrol show node -o`), its QOS
(`sacctmgr -n -P show qos`), the client's version (`scontrol --version`), plus what the submit host itself says: the
file systems under the run's folders (/proc/mounts), the SPANK plugin list (PlugStackConfig) and the container
programs on PATH. `from_outputs` builds the facts from those texts alone, so tests feed it recorded outputs; `read`
runs the commands. What differs between Slurm releases is answered here (`SiteFacts.job_end_time_in_env`, ...), so
the verdicts above need no version numbers."""

from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from beam_slurm.core.errors import ConfigError, ConfigProblem
from beam_slurm.slurm import preemption, scheduler, values

QUERY_TIMEOUT_S = 20.0  # a controller that does not answer within this is an outage (SlurmUnreachable)
QOS_FIELDS = (
    "Name",
    "Preempt",
    "PreemptMode",
    "GraceTime",  # the first four as `preemption.parse_qos` reads them
    "MaxSubmitJobsPerUser",
    "MaxSubmitJobsPerAccount",
    "GrpSubmitJobs",
)
DEFAULT_CRED_EXPIRE_S = 120  # Slurm's credential window when AuthInfo names no cred_expire (or one under 5)
FIXED_MAX_BATCH_REQUEUE = 5  # before 23.02 MaxBatchRequeue was this constant, not a setting
CONTAINER_PROGRAMS = ("enroot", "apptainer", "singularity")
PYXIS_PLUGIN = "spank_pyxis.so"
_INCLUDE = re.compile(r"^\s*include\s+(\S+)", re.IGNORECASE)


RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def version_tuple(text: str) -> tuple[int, ...]:
    """'22.05.8' (or 'slurm-wlm 22.05.8', 'slurm 24.11.5') -> (22, 5, 8); () when it holds no version."""
    found = RELEASE.search(text or "")
    return tuple(int(part) for part in found.groups() if part is not None) if found else ()


@dataclass(frozen=True)
class NodeFacts:
    """One node of the partition, as `scontrol show node -o` prints it."""

    name: str
    gres: str  # Gres= as printed: 'gpu:8', 'gpu:h100:8(S:0-1)', '(null)'
    tmp_disk_mb: int  # TmpDisk= (MB of TmpFS; 0 where slurm.conf does not say)
    real_memory_mb: int
    state: str

    @property
    def gpus(self) -> int:
        """GPUs of the node's Gres ('gpu:h100:4,gpu:a100:4' -> 8)."""
        total = 0
        for entry in self.gres.split(","):
            parts = entry.split("(")[0].split(":")
            if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
                total += int(parts[-1])
        return total


@dataclass(frozen=True)
class QosFacts:
    """One QOS's job-count limits (sacctmgr); None where it sets none."""

    name: str
    max_submit_per_user: int | None
    max_submit_per_account: int | None
    grp_submit: int | None


@dataclass(frozen=True)
class StorageFacts:
    """The file system a folder lives on, from the submit host's /proc/mounts."""

    path: str  # the folder asked about, as given
    mount_point: str
    fs_type: str  # 'lustre', 'beegfs', 'nfs4', 'ext4', ...
    options: tuple[str, ...]

    @property
    def source(self) -> str:
        """The /proc/mounts line's words that matter: `lustre /lus (flock)`."""
        locking = [o for o in self.options if o in ("flock", "localflock", "noflock", "nolock") or "local_lock" in o]
        return f"{self.fs_type} at {self.mount_point}" + (f" ({','.join(locking)})" if locking else "")


@dataclass(frozen=True)
class SiteFacts:
    """Everything doctor's verdicts read about one site and one partition."""

    config: dict[str, str]  # `scontrol show config`, Key -> value as printed
    partition: dict[str, str]  # the partition's `scontrol show partition -o` row
    nodes: tuple[NodeFacts, ...]  # the partition's nodes
    preemption: preemption.PreemptionInfo
    higher_tiers: tuple[str, ...] = ()  # partitions of a higher PriorityTier sharing a node with it (preemptors)
    qos: tuple[QosFacts, ...] = ()
    qos_unread: str = ""  # why the QOS were not read ('' when they were, or when nothing keeps them)
    unanswered: tuple[str, ...] = ()  # daemons that did not answer (outage.ACCOUNTING)
    client_version: str = ""  # `scontrol --version` of this host
    storage: tuple[StorageFacts, ...] = ()
    plugstack_path: str = ""
    plugstack_text: str | None = None  # None: the file could not be read (plugstack_why)
    plugstack_why: str = ""
    programs: dict[str, str] = field(default_factory=dict)  # program -> its path on this host's PATH

    # -- the configuration, as Slurm prints it
    def setting(self, name: str) -> str:
        """`scontrol show config`'s value of `name`, '' when it prints none."""
        return self.config.get(name, "")

    @property
    def version(self) -> str:
        """The controller's release ('22.05.8'): SLURM_VERSION of its configuration, else this host's client."""
        return self.setting("SLURM_VERSION") or self.client_release

    @property
    def client_release(self) -> str:
        """This host's client release ('22.05.8' of 'slurm-wlm 22.05.8'), '' when unknown."""
        found = RELEASE.search(self.client_version)
        return found.group(0) if found else ""

    @property
    def partition_name(self) -> str:
        return self.partition.get("PartitionName", "")

    def seconds(self, name: str) -> int | None:
        """A duration setting ('10 sec', '300 sec', '00:05:00') in seconds; None where it has none."""
        text = self.setting(name).split()
        if not text:
            return None
        return int(text[0]) if text[0].isdigit() else values.reported_seconds(text[0])

    def number(self, name: str) -> int | None:
        text = self.setting(name)
        return int(text) if text.isdigit() else None

    # -- what differs between releases
    @property
    def cred_expire_text(self) -> str:
        """'cred_expire=10' as AuthInfo gives it, '' when it gives none."""
        return next((p for p in self.setting("AuthInfo").split(",") if p.startswith("cred_expire=")), "")

    @property
    def cred_expire_s(self) -> int:
        """The job-credential window Slurm uses: AuthInfo's cred_expire, 120 s when unset or under 5 (refused)."""
        given = self.cred_expire_text.partition("=")[2]
        return int(given) if given.isdigit() and int(given) >= 5 else DEFAULT_CRED_EXPIRE_S

    @property
    def requeue_hold_s(self) -> int:
        """Seconds a requeued job waits before it may start again: its begin time is now + cred_expire + 1."""
        return self.cred_expire_s + 1

    @property
    def job_end_time_in_env(self) -> bool:
        """SLURM_JOB_END_TIME in the job's environment (23.02 and later)."""
        return version_tuple(self.version) >= (23, 2)

    @property
    def max_batch_requeue(self) -> int:
        """How many failed launches requeue a batch job before Slurm holds it: MaxBatchRequeue, 5 before 23.02."""
        configured = self.number("MaxBatchRequeue")
        return FIXED_MAX_BATCH_REQUEUE if configured is None else configured

    @property
    def max_batch_requeue_text(self) -> str:
        if "MaxBatchRequeue" in self.config:
            return f"MaxBatchRequeue={self.setting('MaxBatchRequeue')}"
        return f"MaxBatchRequeue={FIXED_MAX_BATCH_REQUEUE} (fixed before 23.02; not printed)"

    @property
    def spank_failure_fails_step(self) -> bool:
        """A SPANK plugin (pyxis) that fails fails the step and srun returns 1 (23.11 and later)."""
        return version_tuple(self.version) >= (23, 11)

    @property
    def no_kill_keeps_resources(self) -> bool:
        """After a --no-kill job lost a node, later steps may use all that is left (fixed in 23.02.3)."""
        return version_tuple(self.version) >= (23, 2, 3)

    @property
    def user_signal_setting(self) -> str:
        """The setting that makes a preemption send the job's --signal, spelt for this release."""
        if version_tuple(self.version) >= (23, 2):
            return f"PreemptParameters={preemption.PREEMPT_USER_SIGNAL_PARAMETER}"
        return f"SlurmctldParameters={preemption.USER_SIGNAL_PARAMETER}"

    @property
    def user_signal_given(self) -> str:
        """Which of the two settings this controller has ('' for neither)."""
        if preemption.PREEMPT_USER_SIGNAL_PARAMETER in _words(self.setting("PreemptParameters")):
            return f"PreemptParameters={self.setting('PreemptParameters')}"
        if preemption.USER_SIGNAL_PARAMETER in _words(self.setting("SlurmctldParameters")):
            return f"SlurmctldParameters={self.setting('SlurmctldParameters')}"
        return ""

    @property
    def accounting(self) -> bool:
        """Whether the controller keeps accounting (sacct answers for finished jobs)."""
        return self.setting("AccountingStorageType") not in ("", "accounting_storage/none")

    @property
    def limits_enforced(self) -> bool:
        """QOS and association limits apply (AccountingStorageEnforce has limits, or safe, which implies it)."""
        return bool({"limits", "safe"} & set(_words(self.setting("AccountingStorageEnforce").lower())))

    def scheduler_parameter(self, name: str) -> str | None:
        """The value of `name=value` in SchedulerParameters ('' for a bare flag), None when absent."""
        for word in _words(self.setting("SchedulerParameters")):
            key, _, value = word.partition("=")
            if key == name:
                return value
        return None

    def qos_named(self, name: str | None) -> QosFacts | None:
        """The QOS a job of this recipe runs under: `name`, else `normal` (the usual default)."""
        return next((q for q in self.qos if q.name == (name or "normal")), None)

    @property
    def pyxis_listed(self) -> bool:
        """pyxis' SPANK plugin is a line of PlugStackConfig (or of a file it includes)."""
        return self.plugstack_text is not None and any(
            PYXIS_PLUGIN in line.split("#")[0] for line in self.plugstack_text.splitlines()
        )


def _words(text: str) -> list[str]:
    return [word.strip() for word in (text or "").split(",") if word.strip() and word.strip() != "(null)"]


def _int_or_none(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def parse_nodes(text: str, partition: str) -> tuple[NodeFacts, ...]:
    """The nodes of `partition` in `scontrol show node -o` (each line names its node's partitions)."""
    found = []
    for row in scheduler.parse_partitions(text):  # the same Key=Value lines as partitions
        if partition not in row.get("Partitions", "").split(","):
            continue
        found.append(
            NodeFacts(
                name=row.get("NodeName", ""),
                gres=row.get("Gres", "(null)"),
                tmp_disk_mb=_int_or_none(row.get("TmpDisk", "")) or 0,
                real_memory_mb=_int_or_none(row.get("RealMemory", "")) or 0,
                state=row.get("State", ""),
            )
        )
    return tuple(found)


def parse_qos(text: str) -> tuple[QosFacts, ...]:
    """`sacctmgr -n -P show qos format=<QOS_FIELDS>` rows."""
    rows = (dict(zip(QOS_FIELDS, line.split("|"), strict=False)) for line in text.splitlines())
    return tuple(
        QosFacts(
            name=row["Name"],
            max_submit_per_user=_int_or_none(row.get("MaxSubmitJobsPerUser", "")),
            max_submit_per_account=_int_or_none(row.get("MaxSubmitJobsPerAccount", "")),
            grp_submit=_int_or_none(row.get("GrpSubmitJobs", "")),
        )
        for row in rows
        if row.get("Name")
    )


def _unescape(path: str) -> str:
    """/proc/mounts writes a space in a path as \\040 (tab \\011, newline \\012, backslash \\134)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def storage_of(mounts: str, paths: Mapping[str, str]) -> tuple[StorageFacts, ...]:
    """The mount each folder of `paths` (as given -> absolute, symbolic links resolved) lives on: the longest mount
    point above it, the last mounted where one point is mounted twice."""
    table = []
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            table.append((_unescape(parts[1]), parts[2], tuple(parts[3].split(","))))
    found = []
    for given, path in paths.items():
        best = None
        for point, fs_type, options in table:
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and (best is None or len(point) >= len(best[0])):
                best = (point, fs_type, options)
        if best is not None:
            found.append(StorageFacts(given, *best))
    return tuple(found)


def higher_tiers(rows: list[dict[str, str]], partition: dict[str, str], nodes: str) -> tuple[str, ...]:
    """Partitions of a higher PriorityTier than `partition` with a node in common (each node line of `scontrol show
    node -o` names its partitions): under preempt/partition_prio, those whose jobs may preempt its jobs."""
    tier = _int_or_none(partition.get("PriorityTier", "")) or 0
    name = partition.get("PartitionName", "")
    higher = {r.get("PartitionName", "") for r in rows if (_int_or_none(r.get("PriorityTier", "")) or 0) > tier}
    shared = set()
    for row in scheduler.parse_partitions(nodes):
        together = row.get("Partitions", "").split(",")
        if name in together:
            shared.update(together)
    return tuple(r.get("PartitionName", "") for r in rows if r.get("PartitionName", "") in higher & shared)


def choose_partition(rows: list[dict[str, str]], partition: str | None) -> dict[str, str]:
    """The row of `partition` (the first of a list: the job runs in the first that can start it), else the
    default partition; ConfigError naming cluster.partition when Slurm has no such partition or no default."""
    if partition:
        try:
            name = values.partition_names(partition)[0]
        except values.SlurmValueError as exc:
            raise ConfigError([ConfigProblem("cluster.partition", partition, str(exc))]) from exc
        row = next((r for r in rows if r.get("PartitionName") == name), None)
        if row is None:
            known = ", ".join(r.get("PartitionName", "") for r in rows) or "none"
            problem = f"Slurm has no partition {name!r}"
            raise ConfigError([ConfigProblem("cluster.partition", partition, f"name one it has: {known}", problem)])
        return row
    row = next((r for r in rows if r.get("Default") == "YES"), None)
    if row is None:
        problem = "the cluster has no default partition"
        raise ConfigError([ConfigProblem("cluster.partition", None, "name the partition", problem)])
    return row


def from_outputs(
    *,
    config: str,
    partitions: str,
    nodes: str,
    qos: str,
    partition: str | None,
    client_version: str = "",
    qos_unread: str = "",
    unanswered: Sequence[str] = (),
    mounts: str = "",
    paths: Mapping[str, str] | None = None,
    plugstack_path: str = "",
    plugstack_text: str | None = None,
    plugstack_why: str = "",
    programs: Mapping[str, str] | None = None,
) -> SiteFacts:
    """The facts from the commands' texts (pure): `partition` as cluster.partition gives it (None: the default).
    Raises ConfigError (cluster.partition) when Slurm has no such partition."""
    rows = scheduler.parse_partitions(partitions)
    row = choose_partition(rows, partition)
    name = row.get("PartitionName", "")
    return SiteFacts(
        config=scheduler.parse_config(config),
        partition=row,
        nodes=parse_nodes(nodes, name),
        preemption=preemption.from_outputs(config, partitions, qos, name),
        higher_tiers=higher_tiers(rows, row, nodes),
        qos=parse_qos(qos),
        qos_unread=qos_unread,
        unanswered=tuple(unanswered),
        client_version=client_version.strip(),
        storage=storage_of(mounts, paths or {}),
        plugstack_path=plugstack_path,
        plugstack_text=plugstack_text,
        plugstack_why=plugstack_why,
        programs=dict(programs or {}),
    )


def _ask(argv: list[str]) -> str:
    return scheduler.run(argv, timeout_s=QUERY_TIMEOUT_S)


def nearest_existing(path: str) -> str:
    """`path` with symbolic links resolved, from its nearest folder that exists (a run's folders may not yet)."""
    current = Path(path).expanduser().absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return os.path.realpath(current)


def plugstack(config: Mapping[str, str]) -> tuple[str, str | None, str]:
    """(path, text with its includes, why unread) of PlugStackConfig; Slurm's default is plugstack.conf beside
    slurm.conf. Read on this host: the nodes usually share /etc/slurm (or the configless copy) with it."""
    given = config.get("PlugStackConfig", "")
    conf = config.get("SLURM_CONF") or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    path = given if given and given != "(null)" else str(Path(conf).with_name("plugstack.conf"))
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return path, "", ""  # no file: no SPANK plugin at all
    except OSError as exc:
        return path, None, f"{path}: {exc.strerror}"
    included = []
    for line in text.splitlines():
        match = _INCLUDE.match(line)
        if match:
            pattern = match.group(1) if match.group(1).startswith("/") else str(Path(path).parent / match.group(1))
            for name in sorted(glob.glob(pattern)):
                try:
                    included.append(Path(name).read_text())
                except OSError:
                    continue
    return path, "\n".join([text, *included]), ""


def read(partition: str | None, paths: Sequence[str] = ()) -> SiteFacts:
    """Ask Slurm and this host. Raises SlurmUnreachable when the controller does not answer, ConfigError for a
    partition Slurm does not have; the accounting daemon not answering leaves the QOS unread (`unanswered`)."""
    config = _ask(["scontrol", "show", "config"])
    partitions = _ask(["scontrol", "show", "partition", "-o"])
    nodes = _ask(["scontrol", "show", "node", "-o"])
    client = ""
    try:
        client = _ask(["scontrol", "--version"])
    except scheduler.SlurmCommandError:
        client = ""  # only said beside the controller's release
    parsed = scheduler.parse_config(config)
    qos, why, unanswered = "", "", []
    if parsed.get("AccountingStorageType", "") not in ("", "accounting_storage/none"):
        try:
            qos = _ask(["sacctmgr", "-n", "-P", "show", "qos", "format=" + ",".join(QOS_FIELDS)])
        except scheduler.SlurmUnreachable as exc:
            why, unanswered = str(exc), [exc.daemon]
        except scheduler.SlurmCommandError as exc:
            why = str(exc).splitlines()[0]
    try:
        mounts = Path("/proc/mounts").read_text()
    except OSError:
        mounts = ""
    stack_path, stack_text, stack_why = plugstack(parsed)
    return from_outputs(
        config=config,
        partitions=partitions,
        nodes=nodes,
        qos=qos,
        partition=partition,
        client_version=client,
        qos_unread=why,
        unanswered=unanswered,
        mounts=mounts,
        paths={p: nearest_existing(p) for p in paths},
        plugstack_path=stack_path,
        plugstack_text=stack_text,
        plugstack_why=stack_why,
        programs={name: found for name in CONTAINER_PROGRAMS if (found := shutil.which(name))},
    )
