"""`beam-slurm logs RUN [--attempt N] [--node NAME] [--follow | --json] [--lines N] [--all]`: every log a training job
leaves, in one place: the batch log (the job's `--output` file, found as `batch_log_candidates` says), the attempt's own
logs in `<log_dir>/<jobid>-<attempt>/` and each node's Ray session logs copied there
(`beam_slurm.jobs.ray_cluster.log_copy`). What each form prints: docs, guides/operations.md, "`logs`"."""

from __future__ import annotations

import getpass
import re
import shlex
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO, TypedDict

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError
from beam_slurm.core.atomic_files import read_json
from beam_slurm.core.json_text import json_text
from beam_slurm.core.layout import COMMANDS_FILE, RUN_DIRNAME
from beam_slurm.jobs.ray_cluster.log_copy import COPY_RECORD, RAY_LOGS_DIR
from beam_slurm.launch import runs
from beam_slurm.launch.runs import find_job
from beam_slurm.slurm import scheduler
from beam_slurm.slurm.submission import option_pairs

_ACTIVE = (
    "RUNNING",
    "PENDING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SUSPENDED",
    "SIGNALING",
    "STAGE_OUT",
)
FOLLOW_POLL_S = 1.0  # --follow: how often it looks at the log and asks whether the job still runs
NO_ARRAY_TASK = "4294967294"  # what Slurm writes for %a of a job that is not an array task (its NO_VAL)
_PATTERN = re.compile(r"%(\d*)([%AajNux])")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


class LogFile(TypedDict):
    """One file and its size (empty files too)."""

    path: str  # absolute for the attempt's files; relative to the node's folder for its Ray logs
    bytes: int


class BatchLog(TypedDict):
    """The job's batch log (its `--output` file): where it is and who said so, or where it was looked for."""

    path: str | None  # null when none was found
    found_by: str | None  # who named it: Slurm's StdOut, the run record, the submit line, sbatch's default
    not_found: str | None  # when there is none: every place tried, and why Slurm could not be asked


class RayNodeLogs(TypedDict):
    """One node's Ray session logs, copied into the attempt's folder."""

    node: str
    folder: str
    copy: dict[str, Any] | None  # its COPY.json as the copy wrote it (reason, time, bytes, ...); null without one
    files: list[LogFile]


class LogsJson(TypedDict):
    """`logs --json`: where each log of one attempt of a training job is, and its size, without contents."""

    job_id: str
    attempt: str  # its label, as --attempt takes it: `2`, or `2.1` for an in-job restart
    attempts: list[str]  # the attempts with a log folder, oldest first
    attempt_dir: str
    batch_log: BatchLog
    files: list[LogFile]  # the attempt folder's own files
    hang_dumps: str | None  # the stack dumps' folder when a hang ended the attempt
    ray_logs: list[RayNodeLogs]  # with --node, that node's only


JSON_OUTPUT = LogsJson


def expand_output(pattern: str, fields: Mapping[str, str]) -> str:
    """A `--output` pattern as Slurm expands it: %j job id, %A array job id, %a task id, %x job name, %u user, %N batch
    host, %% a percent sign, %4j pads with zeros; a backslash turns it off; a symbol with no value in `fields` stays."""
    if "\\" in pattern:
        return pattern.replace("\\", "")

    def one(match: re.Match) -> str:
        width, symbol = match.groups()
        value = "%" if symbol == "%" else fields.get(symbol)
        if value is None:
            return match.group(0)
        return value.zfill(int(width)) if width and value.isdigit() else value

    return _PATTERN.sub(one, pattern)


def pattern_fields(job_id: str, facts: Mapping[str, str], job_name: str = "") -> dict[str, str]:
    """The values of the pattern symbols for a job from `scheduler.output_facts` (scontrol's or sacct's names)."""
    array_job, _, task = facts.get("JobID", "").partition("_")
    user = (facts.get("User") or facts.get("UserId", "")).split("(")[0] or getpass.getuser()
    fields = {
        "j": job_id,
        "A": facts.get("ArrayJobId") or array_job or job_id,
        "u": user,
        "a": facts.get("ArrayTaskId") or (task if task.isdigit() else NO_ARRAY_TASK),
        "x": facts.get("JobName") or job_name,
    }
    return {**fields, **({"N": facts["BatchHost"]} if facts.get("BatchHost") else {})}


def sbatch_options(command: str) -> dict[str, str]:
    """The sbatch options of a command line by long name (`-o X` as `output`); the last one wins, as in sbatch."""
    try:
        return dict(option_pairs(shlex.split(command)))
    except ValueError:  # unbalanced quotes: not a command line of ours
        return {}


def submitted_command(job) -> str:
    """The sbatch command `submit` ran for the job: its stage entry in the run record, else the run's commands.sh."""
    for submission in reversed(job.run.submissions):
        for stage in submission.stages:
            if stage.job_id == job.job_id and stage.command:
                return stage.command
    try:
        text = (job.export_path / RUN_DIRNAME / COMMANDS_FILE).read_text(errors="replace")
    except OSError:
        return ""
    found = re.search(rf"^# \w+: job {re.escape(job.job_id)}\n(.+)$", text, re.M)
    return found.group(1) if found else ""


def batch_log_candidates(job, facts: Mapping[str, str]) -> list[tuple[Path, str]]:
    """Where the batch log is, best first, with who said so: Slurm's StdOut (scontrol; sacct where kept), the one the
    job recorded at its start, the submit line's --output (sacct) or the run's sbatch, then sbatch's defaults."""
    command, submitted = sbatch_options(submitted_command(job)), sbatch_options(facts.get("SubmitLine", ""))
    name = facts.get("JobName") or command.get("job-name") or job.run.run_name
    fields = pattern_fields(job.job_id, facts, name)
    recorded = job.run.train_jobs.get(job.job_id)
    workdir = "" if facts.get("WorkDir") in (None, "(null)") else facts["WorkDir"]
    given = [
        (facts.get("StdOut"), f"{facts.get('source')} StdOut"),
        (recorded and recorded.stdout, "the run record"),
        (submitted.get("output"), "sacct SubmitLine"),
        (command.get("output"), "the run's sbatch command"),
    ]
    if not any(pattern for pattern, _ in given) and workdir:
        given.append(("slurm-%A_%a.out" if "_" in facts.get("JobID", "") else "slurm-%j.out", "sbatch's default"))
    expanded = [(Path(expand_output(p, fields)), how) for p, how in given if p and p != "(null)"]
    # A relative name is in the working folder (joining keeps an absolute one as it is).
    found = [(Path(workdir) / path, how) for path, how in expanded if path.is_absolute() or workdir]
    for pattern in (f"*-{job.job_id}.out", f"*{job.job_id}*.out") if workdir else ():
        found += [(hit, f"sacct WorkDir {workdir}") for hit in sorted(Path(workdir).glob(pattern))[:1]]
    return [(path, how) for i, (path, how) in enumerate(found) if all(path != seen for seen, _ in found[:i])]


def batch_log(job) -> tuple[Path | None, str]:
    """(the job's batch log, who named it); when none is written yet, (where it will be or None, what was tried)."""
    with scheduler.noting_outages() as outages:
        candidates = batch_log_candidates(job, scheduler.output_facts(job.job_id))
    for path, how in candidates:
        if path.is_file():
            return path, how
    tried = "; ".join(f"{path} ({how})" for path, how in candidates) or "neither Slurm nor the run record names it"
    unasked = "".join(f"; {error}" for error in outages[-1:])  # where Slurm would have named it
    return (candidates[0][0] if candidates else None), f"not written: {tried}{unasked}"


def tail(path: Path, lines: int, raw: bool = False) -> str:
    """The last `lines` lines of a file (read from its end: a big log costs little); colour codes gone unless `raw`."""
    if lines <= 0:
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(handle.seek(0, 2) - lines * 400, 0))  # from the end: seek returns the size
        text = handle.read().decode(errors="replace")
    return "\n".join((text if raw else _ANSI.sub("", text)).splitlines()[-lines:])


def node_sections(attempt_dir: Path) -> dict[str, Path]:
    base = attempt_dir / RAY_LOGS_DIR
    return {p.name: p for p in sorted(base.iterdir()) if p.is_dir()} if base.is_dir() else {}


def describe_copy(folder: Path) -> str:
    copy = read_json(folder / COPY_RECORD)
    if copy is None:
        return "no copy record"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(copy.get("time", 0)))
    what = {
        "periodic": "a periodic copy (the node's last one: it ended without its final copy, or still runs)",
        "end": "the copy at the end of the attempt",
        "stop": "the copy after the step was stopped (a notice or an operator)",
        "failure": "the copy after a failure",
    }.get(copy.get("reason"), copy.get("reason", "?"))
    extra = (
        f"; {copy['files_left_out']} older files left out (over the size bound)" if copy.get("files_left_out") else ""
    )
    cut = "" if copy.get("finished", True) else "; cut short by cluster.log_copy_s"
    return f"copied {when}, {what}, {copy.get('bytes', 0) / 1e6:.1f} MB{extra}{cut}"


def ray_log_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != COPY_RECORD and not p.name.startswith("."))


def shown_files(files: list[Path], every: bool) -> tuple[list[Path], str]:
    """The files to list (the empty ones only with --all) and a note of how many were left out."""
    kept = files if every else [p for p in files if p.stat().st_size > 0]
    left = len(files) - len(kept)
    return kept, f"; {left} empty files not listed (--all lists them)" if left else ""


def show(job, attempt: str, node: str | None, lines: int, out: TextIO, every: bool = False) -> int:
    attempt_dir = job.attempt_dir(attempt)
    nodes = node_sections(attempt_dir)
    raw = out.isatty()  # colour codes reach a terminal as colours, anything else gets plain text

    def print_tail(title: str, path: Path) -> None:
        print(f"{title}{f' (last {lines} lines)' if lines else ''} ==", file=out)
        if lines:
            print(tail(path, lines, raw), file=out)

    if node is None:
        path, how = batch_log(job)
        if path is None or not path.is_file():
            print(f"== batch log of job {job.job_id}: {how} ==", file=out)
        else:
            print_tail(f"== batch log of job {job.job_id}: {path} (from {how})", path)
        files, hidden = shown_files(sorted(p for p in attempt_dir.iterdir() if p.is_file()), every)
        print(f"\n== attempt {attempt} of job {job.job_id}: {attempt_dir}{hidden} ==", file=out)
        for path in files:
            print(f"  {path.name:<32} {path.stat().st_size:>12,} bytes", file=out)
        hang = attempt_dir / "hang"
        if hang.is_dir():
            dumps = sorted(d for d in hang.glob("*/*.txt") if d.name != "nvidia-smi.txt")
            print(
                f"\n== a hang ended this attempt: stack dumps of {len(dumps)} processes on "
                f"{len({d.parent.name for d in dumps})} nodes in {hang} (one folder per node, processes.json lists "
                "each process's state and innermost frame) ==",
                file=out,
            )
        if (attempt_dir / "train_job.log").is_file():
            print_tail("\n== train_job.log", attempt_dir / "train_job.log")
        if not nodes:
            print("\n== Ray logs: no node has copied its Ray logs for this attempt ==", file=out)
        for name, folder in nodes.items():
            files, hidden = shown_files(ray_log_files(folder), every)
            print(
                f"\n== Ray logs of {name}: {folder} ({len(files)} files{hidden}; {describe_copy(folder)}) ==", file=out
            )
            for path in files:
                print(f"  {str(path.relative_to(folder)):<60} {path.stat().st_size:>12,} bytes", file=out)
        return 0
    if node not in nodes and not (attempt_dir / f"ray-{node}.log").is_file():
        known = ", ".join(nodes) or "none"
        print(
            f"beam-slurm logs: --node {node}: no logs of that node in {attempt_dir} (nodes with Ray logs: {known})",
            file=sys.stderr,
        )
        return 2
    own = attempt_dir / f"ray-{node}.log"
    if own.is_file():
        print_tail(f"== {own}", own)
    if node in nodes:
        folder = nodes[node]
        files, hidden = shown_files(ray_log_files(folder), every)
        print(f"\n== Ray logs of {node}: {folder} ({describe_copy(folder)}{hidden}) ==", file=out)
        for path in files:
            print_tail(f"\n== {node}: {path.relative_to(folder)}", path)
    return 0


def listing(job, attempt: str, node: str | None = None) -> LogsJson:
    """`logs --json`: where each log of the attempt is and its size, without contents (its JSON Schema: the docs'
    JSON-output reference)."""
    attempt_dir = job.attempt_dir(attempt)
    path, how = batch_log(job)

    def sized(paths: Iterable[Path], base: Path | None = None) -> list[LogFile]:
        return [{"path": str(p.relative_to(base) if base else p), "bytes": p.stat().st_size} for p in paths]

    nodes: list[RayNodeLogs] = [
        {
            "node": name,
            "folder": str(folder),
            "copy": read_json(folder / COPY_RECORD),
            "files": sized(ray_log_files(folder), folder),
        }
        for name, folder in node_sections(attempt_dir).items()
        if node is None or name == node
    ]
    hang = attempt_dir / "hang"
    return {
        "job_id": job.job_id,
        "attempt": attempt,
        "attempts": job.attempts(),
        "attempt_dir": str(attempt_dir),
        "batch_log": {
            "path": str(path) if path else None,
            "found_by": how if path else None,
            "not_found": None if path else how,
        },
        "files": sized(sorted(p for p in attempt_dir.iterdir() if p.is_file())),
        "hang_dumps": str(hang) if hang.is_dir() else None,
        "ray_logs": nodes,
    }


def _state(job_id: str, unanswered: list[str] | None = None) -> str:
    """squeue's state of the job; '' once Slurm no longer lists it (or refuses to say). When the controller does not
    answer: SlurmUnreachable, or with `unanswered` (a follow already under way) 'RUNNING' and the outage noted there,
    the first time said on stderr: a controller restarting answers again soon, and the log still grows meanwhile."""
    try:
        state = scheduler.job_state(job_id)
    except scheduler.SlurmUnreachable as exc:
        if unanswered is None:
            raise
        if not unanswered:
            print(f"beam-slurm logs: {exc}; following on until it answers (Ctrl-C to stop)", file=sys.stderr)
        unanswered.append(str(exc))
        return "RUNNING"
    except scheduler.SlurmCommandError:
        return ""
    if unanswered:
        unanswered.clear()
    return state


def _state_to_follow(job_id: str) -> str | None:
    """The job's state before following it; None (said on stderr) when the controller does not answer."""
    try:
        return _state(job_id)
    except scheduler.SlurmUnreachable as exc:
        print(f"beam-slurm logs: cannot follow job {job_id}: could not ask whether it runs: {exc}", file=sys.stderr)
        return None


def follow(job, path: Path, out: TextIO, asked: bool = False) -> int:
    """Print `path` as it grows until the job is no longer queued or running: 0, also on Ctrl-C; 1 (saying so) when
    the job ended without writing anything to it, or when the controller does not answer at the start (unless
    `asked` already)."""
    if not asked and _state_to_follow(job.job_id) is None:
        return 1
    position = 0
    unanswered: list[str] = []
    try:
        while True:
            alive = _state(job.job_id, unanswered) in _ACTIVE
            if path.is_file():
                with open(path, "rb") as handle:
                    handle.seek(position)
                    chunk = handle.read()
                position += len(chunk)
                if chunk:
                    text = chunk.decode(errors="replace")
                    out.write(text if out.isatty() else _ANSI.sub("", text))
                    out.flush()
            if not alive:
                break
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return 0
    if position == 0:
        print(f"beam-slurm logs: job {job.job_id} ended without writing anything to {path}", file=sys.stderr)
        return 1
    return 0


def follow_batch_log(job, out: TextIO) -> int:
    """`logs --follow` of the batch log: also of a job still pending (it says so once, then waits for the lines)."""
    path, how = batch_log(job)
    state = _state_to_follow(job.job_id)
    if state is None:
        return 1
    if path is None or not (path.is_file() or state in _ACTIVE):
        print(f"beam-slurm logs: cannot follow the batch log of job {job.job_id}: {how}", file=sys.stderr)
        return 2
    if state == "PENDING":
        print(
            f"beam-slurm logs: job {job.job_id} is pending; waiting for it to start and write {path} (Ctrl-C to stop)",
            file=sys.stderr,
        )
    return follow(job, path, out, asked=True)


def build_parser():
    args = VerbArgs(
        "logs",
        "beam-slurm logs RUN [--attempt N] [--node NAME] [--follow | --json] [--lines N] [--all]: the batch "
        "log, the attempt's logs and each node's Ray logs of a training job.\n\nRUN: the run folder (its "
        "export path), its run name, or the training job's id.",
        settings=False,
    )
    args.add_argument("run", metavar="RUN", help="run folder, run name or training job id")
    args.add_argument("--attempt", help="attempt: 2, or 2.1 for an in-job restart (default: the latest with logs)")
    args.add_argument("--node", help="one node: its ray-<node>.log and the tail of each of its Ray logs")
    args.add_argument(
        "--follow",
        action="store_true",
        help="keep printing the batch log (with --node: the node's ray-<node>.log) until the job ends",
    )
    args.add_argument("--lines", type=int, default=40, help="lines from the end of each log (0: list the logs only)")
    args.add_argument("--all", action="store_true", help="list empty files too")
    args.add_argument("--json", action="store_true", help="list the logs (paths, sizes, copy records) as JSON")
    args.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    return args


def main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse(argv).args
        if args.lines < 0:
            raise VerbUsageError(
                f"--lines {args.lines}: give how many lines of each log to show, 0 or more (0 lists "
                "the logs without their lines)"
            )
        if args.json and args.follow:
            raise VerbUsageError("--json and --follow: choose one")
        job = find_job(args.run, args.exports_root)
    except (VerbUsageError, runs.RunNotFound) as exc:
        return parser.fail(exc)
    if args.follow and args.node is None and args.attempt is None:  # the batch log: there before any attempt's
        return follow_batch_log(job, sys.stdout)
    attempts = job.attempts()
    if not attempts:
        return parser.fail(f"job {job.job_id} has no log folder under {job.log_dir} yet (it has not started)")
    attempt = attempts[-1] if args.attempt is None else args.attempt
    if attempt not in attempts:
        return parser.fail(
            f"--attempt {attempt}: job {job.job_id} has logs of attempts {', '.join(map(str, attempts))}"
        )
    if args.json:
        print(json_text(listing(job, attempt, args.node)))
        return 0
    if args.follow:
        return (
            follow(job, job.attempt_dir(attempt) / f"ray-{args.node}.log", sys.stdout)
            if args.node
            else follow_batch_log(job, sys.stdout)
        )
    return show(job, attempt, args.node, args.lines, sys.stdout, every=args.all)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
