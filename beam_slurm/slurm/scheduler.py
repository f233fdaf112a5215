"""Every call this package makes to the Slurm commands (scontrol, srun, squeue, sacct, sacctmgr) goes through this
module; functions return parsed data or raise `SlurmCommandError` with the command and Slurm's own message. Many jobs
are read at once: `squeue_rows` and `sacct_rows` answer for any number of jobs with one call each (a 64-run sweep's
status is one squeue and one sacct, however often `status --watch` refreshes)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from beam_slurm.slurm import outage


class SlurmCommandError(RuntimeError):
    """A Slurm command failed; the message holds the command line and its stderr."""


class SlurmUnreachable(SlurmCommandError):
    """The daemon a command asks did not answer (`daemon`: outage.CONTROLLER or outage.ACCOUNTING): an outage, not a
    refusal. Its message names the daemon, holds the command and Slurm's words (`detail`) and says what to do."""

    def __init__(self, detail: str, daemon: str):
        super().__init__(outage.outage_text(daemon, detail))
        self.detail, self.daemon = detail, daemon

    @property
    def maybe_done(self) -> bool:
        """It timed out: the daemon may have done what was asked (a cancel, a signal) before its answer was lost."""
        return outage.timed_out(self.detail)

    @property
    def who(self) -> str:
        """ "Slurm's controller (slurmctld)" or "Slurm's accounting daemon (slurmdbd)"."""
        return outage.NAMES[self.daemon]


def may_have_been_done(error: BaseException) -> bool:
    """Whether a Slurm command that failed may have done what it asked anyway (a cancel, a signal): its daemon timed
    out, so the request may have arrived before the answer was lost."""
    return isinstance(error, SlurmUnreachable) and error.maybe_done


_NOTED: ContextVar[tuple[list[SlurmUnreachable], ...]] = ContextVar("slurm_outages_noted", default=())


@contextmanager
def noting_outages() -> Iterator[list[SlurmUnreachable]]:
    """Collect every SlurmUnreachable that a command inside raised, also those a caller caught and answered without
    (job_view reads states from squeue alone when sacct fails): a verb can then say what its answer lacks. Nested
    ones each see every outage inside them."""
    seen: list[SlurmUnreachable] = []
    token = _NOTED.set((*_NOTED.get(), seen))
    try:
        yield seen
    finally:
        _NOTED.reset(token)


def _unreachable(detail: str, daemon: str) -> SlurmUnreachable:
    error = SlurmUnreachable(detail, daemon)
    for seen in _NOTED.get():
        seen.append(error)
    return error


def run(argv: Sequence[str], timeout_s: float = 60.0, *, survive_sigterm: bool = False) -> str:
    """Run a Slurm command; `survive_sigterm`: ignore SIGTERM (sent to the batch step while Slurm ends the job)."""
    try:
        ignore_sigterm = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if survive_sigterm else None
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False, preexec_fn=ignore_sigterm
        )
    except FileNotFoundError as exc:
        raise SlurmCommandError(f"{argv[0]} not found on PATH; run this inside a Slurm cluster") from exc
    except subprocess.TimeoutExpired as exc:
        message = f"{shlex.join(argv)} did not answer within {timeout_s:.0f} s"
        raise _unreachable(message, outage.daemon_of(argv[0])) from exc
    if done.returncode != 0:
        text = done.stderr.strip() or done.stdout.strip()
        message = f"{shlex.join(argv)} failed ({done.returncode}): {text}"
        daemon = outage.unanswered(argv[0], text)
        raise SlurmCommandError(message) if daemon is None else _unreachable(message, daemon)
    return done.stdout


def expand_hostnames(nodelist: str) -> list[str]:
    """`n[1-3],gpu7` -> ['n1', 'n2', 'n3', 'gpu7'] (scontrol show hostnames), in Slurm's order."""
    return run(["scontrol", "show", "hostnames", nodelist]).split() if nodelist else []


def requeue(job_id: str | int) -> None:
    """`scontrol requeue`: steps cancelled, the batch script starts again from its top with SLURM_RESTART_COUNT+1."""
    run(["scontrol", "requeue", str(job_id)], survive_sigterm=True)


def job_info(job_id: str | int) -> dict[str, str]:
    """`scontrol show job -o <id>` as a dict (JobState, RunTime, TimeLimit, NodeList, Restarts, ...)."""
    text = run(["scontrol", "show", "job", "-o", str(job_id)])
    return parse_job(text)


def parse_job(text: str) -> dict[str, str]:
    """`scontrol show job` (one line with -o, or its indented lines) as a dict."""
    return _fields(text)


def _fields(line: str) -> dict[str, str]:
    """`Key=Value ...` of scontrol's one-line output. Split at whitespace only: scontrol quotes nothing, so a quote
    in a value (a path, the command) is part of it, not the start of a quoted word."""
    return {key: value for key, sep, value in (token.partition("=") for token in line.split()) if sep}


def job_state(job_id: str | int) -> str:
    """The job's state as squeue shows it (PENDING, RUNNING, ...), or '' once squeue no longer lists it."""
    out = run(["squeue", "--noheader", "--format=%T", f"--jobs={job_id}"])
    return out.strip().splitlines()[0].strip() if out.strip() else ""


def step_nodes(job_id: str | int, step_name: str) -> dict[str, str]:
    """Running steps named `step_name` by their node list ('n3' for a one-node step), in one squeue call."""
    out = run(["squeue", "--steps", "--noheader", "--format=%i %j %N", f"--jobs={job_id}"])
    rows = (line.split() for line in out.splitlines())
    return {row[2]: row[0] for row in rows if len(row) == 3 and row[1] == step_name}


def signal_step(step_id: str, signal_name: str) -> None:
    """Deliver a signal to every task of one step (`scancel --signal=NAME <job>.<step>`), without ending it."""
    run(["scancel", f"--signal={signal_name}", step_id])


def signal_batch(job_id: str | int, signal_name: str) -> None:
    """Signal the batch shell only (`scancel --batch`), not the steps: it asks for a save and stops them in order."""
    run(["scancel", "--batch", f"--signal={signal_name}", str(job_id)])


def release(job_id: str | int) -> None:
    """`scontrol release <job>`: a job submitted with --hold may start (every task of an array)."""
    run(["scontrol", "release", str(job_id)])


def cancel(*job_ids: str | int) -> None:
    """`scancel <job> ...`: end jobs (a pending one never starts)."""
    run(["scancel", *map(str, job_ids)])


def update_excluded_nodes(job_id: str | int, nodes: Sequence[str]) -> None:
    """Set the job's ExcNodeList (replacing the earlier one); Slurm accepts it only while the job is pending or requeued
    and completing. Run right after the batch shell's requeue, while Slurm signals the batch step: ignores SIGTERM."""
    run(["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(nodes)}"], survive_sigterm=True)


def partition_node_states(partition: str = "") -> dict[str, str]:
    """Every node of `partition` (the default partition when empty) -> its state as sinfo prints it."""
    argv = ["sinfo", "--noheader", "--Node", "--format=%N %t"] + ([f"--partition={partition}"] if partition else [])
    return {parts[0]: parts[1] for parts in (line.split() for line in run(argv).splitlines()) if len(parts) == 2}


def usable_partition_nodes(partition: str = "") -> list[str]:
    """Nodes of `partition` (the default partition when empty) that are not down, drained or failing (sinfo)."""
    return [
        node
        for node, state in partition_node_states(partition).items()
        if not state.rstrip("*~#!%$@^-").startswith(("down", "drain", "fail", "maint"))
    ]


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config` ('Key = Value' lines) as a dict."""
    pairs = ((key.strip(), sep, value) for key, sep, value in (line.partition("=") for line in text.splitlines()))
    return {key: value.strip() for key, sep, value in pairs if sep and key and " " not in key}


def parse_partitions(text: str) -> list[dict[str, str]]:
    """`scontrol show partition -o` (one partition per line, Key=Value tokens) as dicts."""
    return [_fields(line) for line in text.splitlines() if line.strip()]


def partition_info(partition: str = "") -> dict[str, str]:
    """`scontrol show partition -o` of `partition` (default if empty) as a dict; SlurmCommandError if unknown."""
    rows = parse_partitions(run(["scontrol", "show", "partition", "-o", *([partition] if partition else [])]))
    row = rows[0] if partition and rows else next((r for r in rows if r.get("Default") == "YES"), None)
    if row is None:
        raise SlurmCommandError("scontrol show partition: the cluster has no default partition; set cluster.partition")
    return row


def config_value(name: str) -> str:
    """One value of the controller's running configuration (`scontrol show config`); '' when it has none."""
    return parse_config(run(["scontrol", "show", "config"])).get(name, "")


def accounting_rows(entity: str, fields: Sequence[str], where: Sequence[str] = ()) -> list[dict[str, str]]:
    """`sacctmgr show <entity> [where ...] format=<fields>` as rows of {field: value} (parsable, no header)."""
    out = run(["sacctmgr", "--noheader", "--parsable2", "show", entity, *where, "format=" + ",".join(fields)])
    return [
        dict(zip(fields, line.split("|"), strict=False))
        for line in out.splitlines()
        if line.count("|") >= len(fields) - 1
    ]


QUEUE_FIELDS = ("JobID", "State", "Reason", "TimeUsed", "NodeList", "RestartCnt", "Name", "Dependency")  # squeue -O


def squeue_rows() -> list[dict[str, str]]:
    """Every job the controller still knows, any state, as {field: value} over QUEUE_FIELDS, in ONE squeue call. Not
    `--jobs=<ids>`: with two or more ids squeue loads every job anyway and filters on the client, with one a job the
    controller forgot fails the call; and jobs waiting on a job (`dependents_from`) are in the same answer."""
    fmt = ",".join(f"{name}:|" for name in QUEUE_FIELDS)
    out = run(["squeue", "--noheader", "--states=all", "-O", fmt])
    rows = ([p.strip() for p in line.split("|")] for line in out.splitlines())
    return [dict(zip(QUEUE_FIELDS, parts, strict=False)) for parts in rows if len(parts) >= len(QUEUE_FIELDS)]


ACCOUNTING_FIELDS = ("JobID", "State", "Reason", "Elapsed", "NodeList", "ExitCode")  # what `sacct_rows` asks for


def sacct_rows(job_ids: Sequence[str], fields: Sequence[str] = ACCOUNTING_FIELDS) -> list[dict[str, str]]:
    """Accounting records of many jobs, ONE sacct call: allocations only (-X), every attempt (-D, oldest first)."""
    if not job_ids:
        return []
    out = run(
        [
            "sacct",
            "--noheader",
            "--parsable2",
            "-X",
            "-D",
            f"--jobs={','.join(job_ids)}",
            "--format=" + ",".join(fields),
        ]
    )
    return [
        dict(zip(fields, parts, strict=False))
        for parts in (line.split("|") for line in out.splitlines())
        if len(parts) >= len(fields)
    ]


# What `output_facts` asks sacct for (StdOut only where the accounting keeps it: Slurm 23.02 and later).
OUTPUT_FIELDS = ("JobID", "JobName", "User", "WorkDir", "StdOut", "SubmitLine")


def output_facts(job_id: str | int) -> dict[str, str]:
    """What names a job's batch log, `source` saying who answered: `scontrol show job` while the controller knows the
    job (StdOut, WorkDir, JobName, UserId, ArrayJobId, ArrayTaskId, BatchHost), else `accounted_output`."""
    try:
        return {**job_info(job_id), "source": "scontrol"}
    except SlurmCommandError:
        return accounted_output(job_id)


def accounted_output(job_id: str | int) -> dict[str, str]:
    """sacct's OUTPUT_FIELDS of a job (accounting keeps them for good); {} when it does not know the job."""
    for fields in (OUTPUT_FIELDS, tuple(f for f in OUTPUT_FIELDS if f != "StdOut")):
        try:
            out = run(["sacct", "--noheader", "--parsable2", "-X", f"--jobs={job_id}", "--format=" + ",".join(fields)])
        except SlurmCommandError:
            continue  # an older sacct refuses the StdOut field: ask again without it
        rows = [line.split("|", len(fields) - 1) for line in out.splitlines()]  # SubmitLine last: it may hold '|'
        return next(
            ({**dict(zip(fields, row, strict=False)), "source": "sacct"} for row in rows if len(row) == len(fields)), {}
        )
    return {}


ALLOCATION_FIELDS = ("JobID", "State", "ElapsedRaw", "NNodes", "Submit", "Start", "End")
# `status` reads both in one call: the job rows and the goodput ledger from the same sacct answer.
STATUS_FIELDS = ACCOUNTING_FIELDS + tuple(f for f in ALLOCATION_FIELDS if f not in ACCOUNTING_FIELDS)


def allocation_records(job_ids: Sequence[str]) -> list[dict[str, str]]:
    """Every allocation record of the jobs (`sacct -D -X`: each requeued instance, and the part of a job before
    Slurm resized it, whose state is RESIZING), oldest first, as {field: value} over ALLOCATION_FIELDS."""
    return sacct_rows(job_ids, ALLOCATION_FIELDS)


def job_folders(job_id: str | int) -> list[str]:
    """Where a job wrote: its output file and working folder (`output_facts`). [] when Slurm does not know the job."""
    facts = output_facts(job_id)
    return [v for v in (facts.get("StdOut", ""), facts.get("WorkDir", "")) if v and v != "(null)"]


def dependents_from(rows: Sequence[Mapping[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Pending jobs of `squeue_rows` by the job id they wait on: {'123': [('130', 'eval-step-10'), ...]}."""
    found: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        if row.get("State", "").split()[:1] != ["PENDING"]:
            continue
        for token in row.get("Dependency", "").replace(",", ":").replace("?", ":").split(":"):
            upstream = token.split("(")[0].strip()
            if upstream.isdigit():
                found.setdefault(upstream, []).append((row["JobID"], row.get("Name", "")))
    return found


@dataclass
class AllocationInfo:
    """What the batch shell knows about its allocation from Slurm's environment."""

    job_id: str  # SLURM_JOB_ID
    restart_count: int  # SLURM_RESTART_COUNT (0 on the first attempt, +1 per requeue)
    nodes: list[str]  # expanded SLURM_JOB_NODELIST
    cpus_on_node: int  # SLURM_CPUS_ON_NODE of the batch host (homogeneous nodes assumed)
    gpus_on_node: int  # SLURM_GPUS_ON_NODE of the batch host, 0 when unset
    extra: dict[str, str] = field(default_factory=dict)  # other SLURM_* variables worth logging


def allocation_from_env(environ: Mapping[str, str] | None = None) -> AllocationInfo:
    """Read the allocation from the batch shell's environment; raises SlurmCommandError outside a job."""
    environ = os.environ if environ is None else environ
    job_id = environ.get("SLURM_JOB_ID", "")
    if not job_id:
        raise SlurmCommandError("SLURM_JOB_ID is not set: run this inside an sbatch/salloc allocation")
    nodelist = environ.get("SLURM_JOB_NODELIST", "") or environ.get("SLURM_NODELIST", "")
    number = lambda name: int(environ.get(name, "0") or 0)  # noqa: E731
    return AllocationInfo(
        job_id,
        number("SLURM_RESTART_COUNT"),
        expand_hostnames(nodelist),
        number("SLURM_CPUS_ON_NODE"),
        number("SLURM_GPUS_ON_NODE"),
        # SLURM_JOB_END_TIME: Slurm 23.02 and later; the end time when the controller does not answer.
        {
            k: environ[k]
            for k in ("SLURM_JOB_NAME", "SLURM_SUBMIT_DIR", "SLURM_JOB_PARTITION", "SLURM_JOB_END_TIME")
            if k in environ
        },
    )


def srun_per_node(
    nodes: int,
    command: Sequence[str],
    *,
    cpus_per_task: int = 0,
    gpus_per_node: int = 0,
    kill_on_bad_exit: bool = True,
    job_name: str = "",
    extra_args: Sequence[str] = (),
) -> list[str]:
    """argv of one srun step running `command` once on each of `nodes` nodes, asking for every CPU and GPU of the node:
    by default a step gets one CPU per task, which under task/cgroup is all Ray could use."""
    optional = [
        (cpus_per_task > 0, f"--cpus-per-task={cpus_per_task}"),
        (gpus_per_node > 0, f"--gpus-per-node={gpus_per_node}"),
        (bool(job_name), f"--job-name={job_name}"),
    ]
    return [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        f"--kill-on-bad-exit={1 if kill_on_bad_exit else 0}",
        "--wait=0",
        *(option for wanted, option in optional if wanted),
        *extra_args,
        *command,
    ]


def comment_rows() -> list[tuple[str, str, str]]:
    """(job id, state, comment) of every job of this user the controller still knows, any state, in ONE squeue call:
    the submission token `submission` puts in each job's `--comment`. The job id is the array's own id for an
    array's tasks (`%A`), as `sbatch --parsable` gave it. sacct keeps comments only with
    AccountingStoreFlags=job_comment, so squeue is asked, never sacct."""
    out = run(["squeue", "--noheader", "--states=all", "--me", "--format=%A|%T|%k"])
    rows = []
    for line in out.splitlines():
        job_id, sep, rest = line.partition("|")
        state, sep2, comment = rest.partition("|")
        if sep and sep2 and job_id.strip().isdigit():
            rows.append((job_id.strip(), state.strip(), comment.strip()))
    return rows


JOB_TIME_FIELDS = ("SubmitTime", "EligibleTime", "StartTime", "EndTime")


def job_times(job_id: str | int) -> dict[str, datetime]:
    """SubmitTime, EligibleTime, StartTime and EndTime of `scontrol show job` as naive datetimes on the controller's
    clock, to the second; a time Slurm does not know (Unknown, None) is left out. After a requeue SubmitTime is the
    requeue and EligibleTime when the job may start again."""
    found = {}
    for name, value in job_info(job_id).items():
        if name in JOB_TIME_FIELDS:
            try:
                found[name] = datetime.fromisoformat(value)
            except ValueError:
                continue
    return found
