"""Submitting batch jobs (`sbatch --parsable`) and reading many jobs' states at once (squeue + sacct): the pipeline
renders an `SbatchRequest`, shows it (`--dry-run`), submits it and later asks `job_records` how the jobs are doing
(`job_view`: one squeue and one sacct call through `scheduler`, for any number of jobs)."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from beam_slurm.slurm import scheduler
from beam_slurm.slurm.scheduler import SlurmCommandError

DEPENDENCY_TYPES = ("afterok", "afterany")
# States after which a job never runs again (a requeued job goes back to PENDING instead).
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
    "PREEMPTED",
    "SPECIAL_EXIT",
}
ACTIVE_STATES = {
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
    "RESV_DEL_HOLD",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class SbatchRequest:
    """One `sbatch` call: options, the batch script, its arguments and the variables exported to the job."""

    script: str  # path of the batch script (absolute, so the job finds it from any directory)
    options: list[str] = field(default_factory=list)  # one argument each (`--nodes=2`), over #SBATCH headers
    script_args: list[str] = field(default_factory=list)  # after the script (Hydra overrides, stage flags): "$@"
    # Variables set for the job on top of the submitting environment (`--export=ALL,NAME=value,...`). Only
    # non-secret values: they appear on the command line and in the run manifest.
    export: dict[str, str] = field(default_factory=dict)
    dependency_ids: list[str] = field(default_factory=list)  # job ids this job waits for
    dependency_type: str = "afterok"  # or afterany (start when the dependencies ended, however; afterok: completed)
    array: str = ""  # job array spec (`0-3`, `0-9%2`); empty = a single job

    def argv(self) -> list[str]:
        """The full sbatch command line."""
        argv = ["sbatch", "--parsable"]
        if self.export:
            argv.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in self.export.items())]))
        if self.dependency_ids:
            argv.append(f"--dependency={self.dependency_type}:" + ":".join(self.dependency_ids))
            # Keep a job whose dependency failed pending (Reason=DependencyNeverSatisfied) instead of letting a
            # site's kill_invalid_depend cancel it: nothing is cancelled that the user did not ask for.
            argv.append("--kill-on-invalid-dep=no")
        if self.array:
            argv.append(f"--array={self.array}")
        return argv + list(self.options) + [self.script] + list(self.script_args)

    def shell(self) -> str:
        """The command as one shell-safe line (every value quoted)."""
        return shlex.join(self.argv())

    def problems(self) -> list[str]:
        """What would make sbatch misread this request (checked before anything is submitted)."""
        out = []
        if self.dependency_type not in DEPENDENCY_TYPES:
            out.append(f"dependency type {self.dependency_type!r}: use one of {', '.join(DEPENDENCY_TYPES)}")
        for name, value in self.export.items():
            if not _ENV_NAME.match(name):
                out.append(f"exported variable name {name!r} is not a valid environment variable name")
            if "," in value or "\n" in value:
                out.append(
                    f"exported {name}={value!r}: sbatch --export splits on ',', so the value may not contain "
                    "',' or a newline; use a path without them"
                )
        return out


SBATCH_ENVIRONMENT = {
    "time": "SBATCH_TIMELIMIT",
    "partition": "SBATCH_PARTITION",
    "account": "SBATCH_ACCOUNT",
    "qos": "SBATCH_QOS",
    "gpus-per-node": "SBATCH_GPUS_PER_NODE",
    "mem": "SBATCH_MEM_PER_NODE",
}
"""The sbatch input variables of the options `effective_options` reads (a variable beats the script's header)."""
_SHORT_OPTIONS = {
    "-t": "time",
    "-p": "partition",
    "-A": "account",
    "-q": "qos",
    "-N": "nodes",
    "-G": "gpus",
    "-o": "output",
    "-J": "job-name",
}


def option_pairs(words: list[str]) -> list[tuple[str, str]]:
    """(long name, value) of sbatch options written `--name=value`, `--name value`, `-x value` or `-xvalue`."""
    pairs, index = [], 0
    while index < len(words):
        word = words[index]
        nxt = words[index + 1] if index + 1 < len(words) else ""
        if word.startswith("--"):
            name, sep, value = word[2:].partition("=")
            if not sep and nxt and not nxt.startswith("-"):
                value, index = nxt, index + 1
            pairs.append((name, value))
        elif word[:2] in _SHORT_OPTIONS:
            value = word[2:] or nxt
            index += 0 if word[2:] else 1
            pairs.append((_SHORT_OPTIONS[word[:2]], value))
        index += 1
    return pairs


def effective_options(request: SbatchRequest, environ: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Each sbatch option of the request -> (value, where it came from), as sbatch decides it: the command line, then
    the SBATCH_* variables, then the script's `#SBATCH` header (read up to its first command, as sbatch does)."""
    environ = os.environ if environ is None else environ
    found: dict[str, tuple[str, str]] = {}
    try:
        lines = open(request.script, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        lines = []
    for line in lines[1:] if lines and lines[0].startswith("#!") else lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if stripped.startswith("#SBATCH"):
            found.update(
                (name, (value, "the script's #SBATCH header"))
                for name, value in option_pairs(shlex.split(stripped[len("#SBATCH") :], comments=True))
            )
    found.update(
        (name, (environ[variable], variable)) for name, variable in SBATCH_ENVIRONMENT.items() if environ.get(variable)
    )
    found.update((name, (value, "the command line")) for name, value in option_pairs(list(request.options)))
    return found


def submission_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment minus an enclosing job's SLURM_* (the training job submits evaluation jobs): its
    SLURM_MEM_PER_NODE, SLURM_CPUS_PER_TASK etc. would reach sbatch and the child and mis-size its steps."""
    environ = dict(os.environ if environ is None else environ)
    inside = bool(environ.get("SLURM_JOB_ID"))
    return {k: v for k, v in environ.items() if not (inside and k.startswith("SLURM_")) or k == "SLURM_CONF"}


def submit(request: SbatchRequest, environ: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> str:
    """Submit and return the job id (for an array, the array's job id). Raises SlurmCommandError."""
    if bad := request.problems():
        raise SlurmCommandError("; ".join(bad))
    try:
        done = subprocess.run(
            request.argv(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=submission_environment(environ),
        )
    except FileNotFoundError as exc:
        raise SlurmCommandError(
            "sbatch not found on PATH; run this where Slurm's client commands are installed"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmCommandError(f"sbatch did not answer within {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        raise SlurmCommandError(
            f"{request.shell()} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    # --parsable prints "<id>" or "<id>;<cluster>".
    job_id = done.stdout.strip().splitlines()[-1].split(";")[0].strip() if done.stdout.strip() else ""
    if not job_id.isdigit():
        raise SlurmCommandError(f"sbatch printed no job id: {done.stdout.strip()!r}")
    return job_id


@dataclass(frozen=True)
class SlurmAnswer:
    """What `sbatch --test-only` said: accepted (with the start Slurm expects), refused (why), or None: not asked."""

    accepted: bool | None
    text: str


_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Zero Bytes were transmitted",
    "Connection refused",
    "Unable to establish",
    "configuration file",
    "ClusterName",
    "s_p_parse_file",
)
"""Answers that say Slurm could not be asked (no controller, no configuration here), not that it refused."""
REFUSAL_SETTINGS = (
    ("partition", "cluster.partition"),
    ("account", "cluster.account"),
    ("qos", "cluster.qos"),
    ("time limit", "cluster.time_limit"),
    ("memory", "cluster.mem_per_node"),
    ("node configuration", "cluster.nodes or cluster.gpus_per_node"),
    ("node count", "cluster.nodes"),
    ("gres", "cluster.gpus_per_node"),
)


def sbatch_test_only(
    request: SbatchRequest, environ: Mapping[str, str] | None = None, timeout_s: float = 30.0
) -> SlurmAnswer:
    """`sbatch --test-only` of the request, less its dependency (test-only ignores them); nothing is queued."""
    argv = dataclasses.replace(request, dependency_ids=[]).argv()
    argv[1:2] = ["--test-only"]  # instead of --parsable
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=submission_environment(environ)
        )
    except FileNotFoundError:
        return SlurmAnswer(None, "sbatch not found on PATH")
    except subprocess.TimeoutExpired:
        return SlurmAnswer(None, f"sbatch --test-only did not answer within {timeout_s:.0f} s")
    text = " ".join((done.stderr.strip() or done.stdout.strip()).split())
    text = text.replace("sbatch: error: ", "").replace("sbatch: ", "")
    unreachable = any(marker in text for marker in _UNREACHABLE)
    return SlurmAnswer(True if done.returncode == 0 else None if unreachable else False, text)


_RESOURCE_OPTIONS = ("nodes", "cpus-per-task", "mem", "mem-per-cpu", "gpus-per-node", "gres", "constraint")


def refusal_setting(text: str, request: SbatchRequest | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The setting that changes what Slurm refused (from the words of its answer); for a node shape Slurm has not,
    the job's own requests that no key rendered too (a stage script's header, an SBATCH_* variable)."""
    lowered = text.lower()
    setting = next((key for word, key in REFUSAL_SETTINGS if word in lowered), "the cluster.* keys")
    if request is None or "node configuration" not in lowered:
        return setting
    found = effective_options(request, environ)
    inherited = [
        f"--{name}={value} from {source}"
        for name, (value, source) in found.items()
        if name in _RESOURCE_OPTIONS and source != "the command line"
    ]
    if not inherited:
        return setting
    besides = (
        f"what {Path(request.script).name} asks for ({'; '.join(inherited)}; an SBATCH_* variable such as "
        "SBATCH_MEM_PER_NODE outranks the header)"
    )
    keyed = any(found.get(name, ("", ""))[1] == "the command line" for name in ("nodes", "gpus-per-node"))
    return f"{setting}, or {besides}" if keyed else besides


@dataclass
class JobRecord:
    """What Slurm says about one job, merged from squeue (while it is known there) and sacct (history)."""

    job_id: str  # as submitted (an array task: `<array id>_<task>`)
    state: str = "UNKNOWN"  # PENDING, RUNNING, COMPLETED, ... (the first word); UNKNOWN when neither tool knows it
    reason: str = ""  # why a pending job waits (Dependency, DependencyNeverSatisfied, Resources, ...), or ''
    elapsed: str = ""  # run time of the current attempt ([D-]HH:MM:SS)
    nodes: str = ""  # node list of the current or last attempt
    restarts: int = 0  # requeues so far (squeue's RestartCnt, or REQUEUED/PREEMPTED records in sacct)
    exit_code: str = ""  # sacct's ExitCode (`status:signal`) once the job ended

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


def _squeue(rows: list[dict[str, str]], job_ids: set[str]) -> dict[str, JobRecord]:
    return {
        row["JobID"]: JobRecord(
            row["JobID"],
            row["State"].split()[0] if row["State"] else "UNKNOWN",
            "" if row["Reason"] == "None" else row["Reason"],
            row["TimeUsed"],
            row["NodeList"],
            int(row["RestartCnt"]) if row["RestartCnt"].isdigit() else 0,
        )
        for row in rows
        if row["JobID"] in job_ids
    }


def _sacct(rows: list[dict[str, str]]) -> dict[str, JobRecord]:
    records: dict[str, JobRecord] = {}
    for row in rows:
        job_id, reason, nodes = row["JobID"], row["Reason"], row["NodeList"]
        state = row["State"].split()[0] if row["State"] else "UNKNOWN"
        earlier = records.get(job_id)
        restarts = (earlier.restarts + (earlier.state in ("REQUEUED", "PREEMPTED", "NODE_FAIL"))) if earlier else 0
        # sacct lists the attempts oldest first; the last one is the current state.
        records[job_id] = JobRecord(
            job_id,
            state,
            "" if reason == "None" else reason,
            row["Elapsed"],
            "" if nodes == "None assigned" else nodes,
            restarts,
            row["ExitCode"],
        )
    return records


@dataclass
class JobView:
    """What Slurm says about a set of jobs, read with one squeue and one sacct call."""

    records: dict[str, JobRecord]  # job id -> its record (UNKNOWN when neither tool knows it)
    # job id -> the pending jobs (id, name) that wait on it, from the same squeue answer (any job, not only ours)
    waiting_on: dict[str, list[tuple[str, str]]]
    accounting: list[dict[str, str]] = field(default_factory=list)  # sacct's rows over STATUS_FIELDS, for the ledger


def job_view(job_ids: Iterable[str]) -> JobView:
    """Jobs' state from one squeue and one sacct call; squeue wins where it lists the job (pending reason, restarts)."""
    ids = sorted({str(j) for j in job_ids if j}, key=lambda j: (len(j), j))
    if not ids:
        return JobView({}, {})
    try:
        accounting = scheduler.sacct_rows(ids, scheduler.STATUS_FIELDS)
    except SlurmCommandError:
        accounting = []  # accounting may be off on some clusters; squeue alone still answers for live jobs
    history = _sacct(accounting)
    rows = scheduler.squeue_rows()
    live = _squeue(rows, set(ids))
    records: dict[str, JobRecord] = {}
    for job_id in ids:
        old, now = history.get(job_id), live.get(job_id)
        if now is not None and old is not None:
            now.restarts, now.exit_code = max(now.restarts, old.restarts), old.exit_code
        records[job_id] = now or old or JobRecord(job_id)
    return JobView(records, scheduler.dependents_from(rows), accounting)


def job_records(job_ids: Iterable[str]) -> dict[str, JobRecord]:
    """`job_view(job_ids).records`: many jobs' states with one squeue and one sacct call."""
    return job_view(job_ids).records
