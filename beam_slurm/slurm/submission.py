"""Submitting batch jobs (`sbatch --parsable`) and reading many jobs' states at once (squeue + sacct): the pipeline
renders an `SbatchRequest`, shows it (`--dry-run`), submits it and later asks `job_records` how the jobs are doing
(`job_view`: one squeue and one sacct call through `scheduler`, for any number of jobs).

Submission is idempotent: every job carries a submission token in its `--comment`
(`beam-slurm:<run>:<stage>:<12 hex>`). When sbatch's answer is lost (a time-out, a transport error: the controller may
have created the job or not), `submit` asks squeue for the token, waiting while the controller is down, and adopts
the job it finds or submits again: never twice."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from beam_slurm.slurm import outage, scheduler
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
    # The submission token (`submission_token`), sent as `--comment`; a comment the user gave (options, the script's
    # #SBATCH header) is kept in front of it. Empty: `submit` makes one.
    token: str = ""

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
        options = list(self.options)
        if self.token:
            # sbatch keeps the last --comment only: the user's own (option or header) goes in front of the token.
            options = _without_comment(options)
            argv.append(f"--comment={with_token(self.user_comment(), self.token)}")
        return argv + options + [self.script] + list(self.script_args)

    def user_comment(self) -> str:
        """The comment the request's options or its script's #SBATCH header give the job ('' when none)."""
        return effective_options(self, environ={}).get("comment", ("", ""))[0]

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


def _without_comment(options: list[str]) -> list[str]:
    """The options less `--comment=X` / `--comment X` (the comment goes in front of the token instead)."""
    out, skip = [], False
    for word in options:
        if skip:
            skip = False
        elif word == "--comment":
            skip = True
        elif not word.startswith("--comment="):
            out.append(word)
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


TOKEN_PREFIX = "beam-slurm"
_TOKEN_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
TRANSPORT_ERRORS = outage.NO_ANSWER_TEXTS
"""sbatch's words when its request or Slurm's answer got lost on the way: the job may exist or not."""
ANSWER_WAIT_S = 180.0
"""After a lost answer, how long `submit` keeps asking squeue for the token while the controller does not answer."""
DOWN_WAIT_S = 10.0  # of those, while it refuses connections (a fail-over to a backup controller takes seconds)
ASK_AGAIN_S = 2.0  # between two squeue calls while the controller does not answer
SETTLE_S = 3.0  # a request the controller read late (it was stopped) may create its job just after squeue answers
MAX_SUBMISSIONS = 3  # sbatch calls for one job when every answer is lost and Slurm shows no job of the token


def submission_token(owner: str, stage: str, identity: str = "") -> str:
    """A fresh token for one job: `beam-slurm:<owner>:<stage>:<12 hex>`, shell-safe (letters, digits, `._-:`), the
    owner (run or sweep point) cut to 64 characters. With an `identity` (what the stage produces) the hex starts with
    6 of its digest, so `token_prefix` finds the jobs of the same stage output only; the rest is random."""
    return f"{token_prefix(owner, stage, identity)}{secrets.token_hex(3 if identity else 6)}"


def token_prefix(owner: str, stage: str, identity: str = "") -> str:
    """What every token of one owner's stage (producing `identity`) starts with: `beam-slurm:<owner>:<stage>:`, then
    the identity's 6 hex digits when given."""
    safe = [_TOKEN_UNSAFE.sub("_", part).strip("_")[:64] or "-" for part in (owner, stage)]
    digest = hashlib.sha256(identity.encode()).hexdigest()[:6] if identity else ""
    return f"{TOKEN_PREFIX}:{safe[0]}:{safe[1]}:{digest}"


def with_token(comment: str, token: str) -> str:
    """The job's comment: the user's own, then the token (one word of it, as `comment_tokens` reads it)."""
    return f"{comment.strip()} {token}" if comment.strip() else token


def comment_tokens(comment: str) -> list[str]:
    """The submission tokens in a job's comment."""
    return [word for word in comment.split() if word.startswith(TOKEN_PREFIX + ":")]


def is_transport_error(text: str) -> bool:
    """Whether sbatch's message says the request or its answer was lost (not that Slurm refused the job)."""
    return any(marker.lower() in text.lower() for marker in TRANSPORT_ERRORS)


@dataclass(frozen=True)
class SbatchAnswer:
    """One sbatch call: the job id, or why none; `lost`: the controller may have created the job anyway."""

    job_id: str
    lost: bool
    text: str


def run_sbatch(argv: list[str], environ: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> SbatchAnswer:
    """Run one `sbatch --parsable` command line; never raises for what sbatch said."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=submission_environment(environ)
        )
    except FileNotFoundError as exc:
        raise SlurmCommandError(
            "sbatch not found on PATH; run this where Slurm's client commands are installed"
        ) from exc
    except subprocess.TimeoutExpired:
        return SbatchAnswer("", True, f"sbatch did not answer within {timeout_s:.0f} s")
    said = done.stderr.strip() or done.stdout.strip()
    if done.returncode != 0:
        # No word at all happens too when the controller dropped the connection ("Zero Bytes" in its own log).
        return SbatchAnswer("", not said or is_transport_error(said), f"failed ({done.returncode}): {said}")
    # --parsable prints "<id>" or "<id>;<cluster>".
    job_id = done.stdout.strip().splitlines()[-1].split(";")[0].strip() if done.stdout.strip() else ""
    if not job_id.isdigit():
        return SbatchAnswer("", True, f"printed no job id: {done.stdout.strip()!r}")
    return SbatchAnswer(job_id, False, "")


def jobs_with_token(token: str) -> list[str]:
    """Ids of this user's jobs whose comment holds the token, any state (squeue; lowest first)."""
    found = {job_id for job_id, _, comment in scheduler.comment_rows() if token in comment_tokens(comment)}
    return sorted(found, key=lambda j: (len(j), j))


def active_jobs_with_prefix(prefixes: Iterable[str]) -> dict[str, dict[str, str]]:
    """prefix -> {job id: state} of this user's queued or running jobs whose token starts with it (`token_prefix`),
    for any number of prefixes from ONE squeue call."""
    wanted = list(dict.fromkeys(prefixes))
    found: dict[str, dict[str, str]] = {prefix: {} for prefix in wanted}
    if not wanted:
        return found
    for job_id, state, comment in scheduler.comment_rows():
        if state not in ACTIVE_STATES:
            continue
        for token in comment_tokens(comment):
            for prefix in (p for p in wanted if token.startswith(p)):
                found[prefix][job_id] = state
    return found


class SubmissionUnknown(SlurmCommandError):
    """sbatch's answer was lost and Slurm did not say in time whether it queued the job: the token names it."""

    def __init__(self, message: str, token: str):
        super().__init__(message)
        self.token = token


@dataclass(frozen=True)
class AfterLostAnswer:
    """What to do once sbatch's answer was lost: `adopt` a job, `submit` again, or `unknown` (raise)."""

    action: str  # adopt, submit or unknown
    job_id: str = ""  # the job adopted
    extra: tuple[str, ...] = ()  # more jobs with the same token (earlier lost answers): cancelled


def after_lost_answer(
    found: list[str] | None, submissions: int, max_submissions: int = MAX_SUBMISSIONS
) -> AfterLostAnswer:
    """The decision from squeue's answer for the token (None: Slurm did not answer in time) after `submissions`
    sbatch calls whose answers were all lost: a job found is adopted (the lowest id; any other carrying the same
    token came from an earlier lost call and is cancelled), none found means submit again, up to max_submissions."""
    if found is None:
        return AfterLostAnswer("unknown")
    if found:
        return AfterLostAnswer("adopt", found[0], tuple(found[1:]))
    return AfterLostAnswer("submit" if submissions < max_submissions else "unknown")


def find_token(
    token: str,
    find: Callable[[str], list[str]] = jobs_with_token,
    *,
    wait_s: float = ANSWER_WAIT_S,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[str] | None:
    """The jobs carrying the token, asking again while Slurm does not answer (up to wait_s); None if it never did.
    An empty answer is asked once more after SETTLE_S: a request read late by the controller may just be landing.
    A controller that refuses connections (down, not busy: nothing listens) is asked for DOWN_WAIT_S only."""
    deadline = clock() + wait_s
    settled = False
    while True:
        try:
            found = find(token)
        except SlurmCommandError as exc:
            if isinstance(exc, scheduler.SlurmUnreachable) and not exc.maybe_done:
                deadline = min(deadline, clock() + DOWN_WAIT_S)
            if clock() >= deadline:
                return None
            sleep(ASK_AGAIN_S)
            continue
        if found or settled:
            return found
        settled = True
        sleep(SETTLE_S)


def submit(
    request: SbatchRequest,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    *,
    notify: Callable[[str], object] | None = None,
    wait_s: float = ANSWER_WAIT_S,
    run: Callable[[list[str]], SbatchAnswer] | None = None,
    find: Callable[[str], list[str]] = jobs_with_token,
    cancel: Callable[..., object] = scheduler.cancel,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Submit once and return the job id (for an array, the array's job id); raises SlurmCommandError when Slurm
    refused, SubmissionUnknown when the answer was lost and Slurm did not say in time whether the job exists.

    The request's token (made here when empty) goes into `--comment`. A lost answer (time-out, transport error) is
    settled by asking squeue for the token: the job found is adopted (`notify` gets a line naming it), else sbatch
    runs again with the same token. `run`, `find`, `cancel`, `sleep` and `clock` are the real ones unless a test
    passes its own."""
    if bad := request.problems():
        raise SlurmCommandError("; ".join(bad))
    request.token = request.token or submission_token(Path(request.script).stem, "job")
    say = notify or (lambda line: None)
    sbatch = run or (lambda argv: run_sbatch(argv, environ, timeout_s))
    submissions = 0
    while True:
        answer = sbatch(request.argv())
        submissions += 1
        if answer.job_id:
            if submissions > 1:
                cancel_duplicates(request.token, answer.job_id, say, find=find, cancel=cancel)
            return answer.job_id
        if not answer.lost:
            raise SlurmCommandError(f"{request.shell()} {answer.text}")
        say(f"sbatch's answer was lost ({answer.text}); asking Slurm for the job with comment {request.token}")
        asked_at = clock()
        decision = after_lost_answer(
            find_token(request.token, find, wait_s=wait_s, sleep=sleep, clock=clock), submissions
        )
        asked_s = clock() - asked_at
        if decision.action == "adopt":
            say(f"Slurm has job {decision.job_id} with comment {request.token}: adopted, not submitted again")
            cancel_duplicates(request.token, decision.job_id, say, found=decision.extra, cancel=cancel)
            return decision.job_id
        if decision.action == "unknown":
            raise SubmissionUnknown(
                f"sbatch's answer was lost ({answer.text}) and Slurm did not say in {asked_s:.0f} s whether it "
                f"queued the job: `squeue --me --states=all --format='%i %T %k'` shows it with comment "
                f"{request.token} once the controller answers; `submit` again finds it there",
                request.token,
            )
        say(f"Slurm has no job with comment {request.token}: submitting again")


def cancel_duplicates(
    token: str,
    kept: str,
    say: Callable[[str], object],
    *,
    found: Iterable[str] | None = None,
    find: Callable[[str], list[str]] = jobs_with_token,
    cancel: Callable[..., object] = scheduler.cancel,
) -> None:
    """Cancel the jobs besides `kept` that carry the token: an earlier sbatch call whose answer was lost created them
    late. `found`: the token's jobs as squeue just gave them; else squeue is asked now."""
    if found is None:
        try:
            found = find(token)
        except SlurmCommandError as exc:
            say(f"could not check for other jobs with comment {token}: {exc}")
            return
    extra = [j for j in found if j != kept]
    if not extra:
        return
    try:
        cancel(*extra)
        say(f"job(s) {', '.join(extra)} also carry comment {token} (from a lost answer): cancelled, one job is kept")
    except SlurmCommandError as exc:
        say(f"job(s) {', '.join(extra)} also carry comment {token}; cancelling them failed: {exc}")


@dataclass(frozen=True)
class SlurmAnswer:
    """What `sbatch --test-only` said: accepted (with the start Slurm expects), refused (why), or None: not asked."""

    accepted: bool | None
    text: str


_UNREACHABLE = (*outage.NO_ANSWER_TEXTS, "configuration file", "ClusterName", "s_p_parse_file")
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
    ("feature", "cluster.constraint"),
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
