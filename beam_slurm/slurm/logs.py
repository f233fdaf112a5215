"""`beam-slurm logs RUN [--attempt N] [--node NAME] [--follow | --json]`: every log a training job leaves, in one place.

- the batch log (the job's `--output` file: where Slurm says it is, or, once Slurm forgot the job, its working
  folder read from `sacct`);
- the attempt's own logs in `<log_dir>/<jobid>-<attempt>/` (train_job.log, ray-<node>.log, failure.json, ...);
- each node's Ray session logs, copied by the node to `<log_dir>/<jobid>-<attempt>/ray/<node>/`
  (`beam_slurm.ray_cluster.log_copy`), with when and why the last copy was made.

Without `--node`: the tail of the batch log and of train_job.log, then per node the list of its Ray logs. With
`--node NAME`: that node's ray-<node>.log and the tail of each of its Ray logs. `--follow` keeps printing the batch
log (or, with `--node`, the node's ray-<node>.log) as it grows until the job ends.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, TextIO

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError
from beam_slurm.pipeline import runs
from beam_slurm.ray_cluster.log_copy import COPY_RECORD, RAY_LOGS_DIR
from beam_slurm.slurm import scheduler
from beam_slurm.slurm.attach import find_job

_ACTIVE = ("RUNNING", "PENDING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
           "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT")


def batch_log(job_id: str) -> tuple[Path | None, str]:
    """(the job's output file, how it was found); None when it cannot be found."""
    try:
        out = scheduler.job_info(job_id).get("StdOut", "")
        if out and Path(out).is_file():
            return Path(out), "scontrol"
    except scheduler.SlurmCommandError:
        pass
    try:
        done = subprocess.run(["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "WorkDir,JobName,SubmitLine"],
                              capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None, "neither scontrol nor sacct knows the job"
    for line in done.stdout.splitlines():
        workdir, name, submit = (line.split("|", 2) + ["", ""])[:3]
        if not workdir:
            continue
        given = re.search(r"(?:--output[= ]|-o ?)(\S+)", submit)
        if given:
            path = Path(given.group(1).replace("%j", job_id).replace("%A", job_id).replace("%x", name))
            path = path if path.is_absolute() else Path(workdir) / path
            if path.is_file():
                return path, "sacct SubmitLine"
        for pattern in (f"*-{job_id}.out", f"slurm-{job_id}.out", f"*{job_id}*.out"):
            hits = sorted(Path(workdir).glob(pattern))
            if hits:
                return hits[0], f"sacct WorkDir {workdir}"
        return None, f"no output file of job {job_id} in its working folder {workdir}"
    return None, "sacct does not know the job"


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a text file (read from its end, so a big log costs little)."""
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(size - max(lines, 1) * 400, 0))
        text = handle.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def node_sections(attempt_dir: Path) -> dict[str, Path]:
    base = attempt_dir / RAY_LOGS_DIR
    return {p.name: p for p in sorted(base.iterdir()) if p.is_dir()} if base.is_dir() else {}


def describe_copy(folder: Path) -> str:
    try:
        copy = json.loads((folder / COPY_RECORD).read_text())
    except (OSError, ValueError):
        return "no copy record"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(copy.get("time", 0)))
    what = {"periodic": "a periodic copy (the node's last one: it ended without its final copy, or still runs)",
            "end": "the copy at the end of the attempt", "stop": "the copy after the step was stopped (a notice or "
            "an operator)", "failure": "the copy after a failure"}.get(copy.get("reason"), copy.get("reason", "?"))
    extra = f"; {copy['files_left_out']} older files left out (over the size bound)" if copy.get("files_left_out") else ""
    cut = "" if copy.get("finished", True) else "; cut short by cluster.log_copy_s"
    return f"copied {when}, {what}, {copy.get('bytes', 0) / 1e6:.1f} MB{extra}{cut}"


def ray_log_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != COPY_RECORD and not p.name.startswith("."))


def show(job, attempt: int, node: str | None, lines: int, out: TextIO) -> int:
    attempt_dir = job.attempt_dir(attempt)
    nodes = node_sections(attempt_dir)
    if node is None:
        path, how = batch_log(job.job_id)
        if path is None:
            print(f"== batch log of job {job.job_id}: not found ({how}) ==", file=out)
        else:
            print(f"== batch log of job {job.job_id}: {path} (last {lines} lines) ==", file=out)
            print(tail(path, lines), file=out)
        print(f"\n== attempt {attempt} of job {job.job_id}: {attempt_dir} ==", file=out)
        for path in sorted(p for p in attempt_dir.iterdir() if p.is_file()):
            print(f"  {path.name:<32} {path.stat().st_size:>12,} bytes", file=out)
        hang = attempt_dir / "hang"
        if hang.is_dir():
            dumps = sorted(d for d in hang.glob("*/*.txt") if d.name != "nvidia-smi.txt")
            print(f"\n== a hang ended this attempt: stack dumps of {len(dumps)} processes on "
                  f"{len({d.parent.name for d in dumps})} nodes in {hang} (one folder per node, processes.json lists "
                  "each process's state and innermost frame) ==", file=out)
        if (attempt_dir / "train_job.log").is_file():
            print(f"\n== train_job.log (last {lines} lines) ==", file=out)
            print(tail(attempt_dir / "train_job.log", lines), file=out)
        if not nodes:
            print("\n== Ray logs: no node has copied its Ray logs for this attempt ==", file=out)
        for name, folder in nodes.items():
            files = ray_log_files(folder)
            print(f"\n== Ray logs of {name}: {folder} ({len(files)} files; {describe_copy(folder)}) ==", file=out)
            for path in files:
                print(f"  {str(path.relative_to(folder)):<60} {path.stat().st_size:>12,} bytes", file=out)
        return 0
    if node not in nodes and not (attempt_dir / f"ray-{node}.log").is_file():
        known = ", ".join(nodes) or "none"
        print(f"beam-slurm logs: --node {node}: no logs of that node in {attempt_dir} (nodes with Ray logs: {known})",
              file=sys.stderr)
        return 2
    own = attempt_dir / f"ray-{node}.log"
    if own.is_file():
        print(f"== {own} (last {lines} lines) ==", file=out)
        print(tail(own, lines), file=out)
    if node in nodes:
        folder = nodes[node]
        print(f"\n== Ray logs of {node}: {folder} ({describe_copy(folder)}) ==", file=out)
        for path in ray_log_files(folder):
            print(f"\n== {node}: {path.relative_to(folder)} (last {lines} lines) ==", file=out)
            print(tail(path, lines), file=out)
    return 0


def listing(job, attempt: int, node: str | None = None) -> dict:
    """`logs --json`: where each log of the attempt is and its size, without contents (schema: README)."""
    attempt_dir = job.attempt_dir(attempt)
    path, how = batch_log(job.job_id)

    def sized(paths, base: Path | None = None) -> list[dict]:
        return [{"path": str(p.relative_to(base) if base else p), "bytes": p.stat().st_size} for p in paths]

    nodes = []
    for name, folder in node_sections(attempt_dir).items():
        if node is None or name == node:
            try:
                copy = json.loads((folder / COPY_RECORD).read_text())
            except (OSError, ValueError):
                copy = None
            nodes.append({"node": name, "folder": str(folder), "copy": copy, "files": sized(ray_log_files(folder), folder)})
    hang = attempt_dir / "hang"
    return {"job_id": job.job_id, "attempt": attempt, "attempts": job.attempts(), "attempt_dir": str(attempt_dir),
            "batch_log": {"path": str(path) if path else None, "found_by": how if path else None,
                          "not_found": None if path else how},
            "files": sized(sorted(p for p in attempt_dir.iterdir() if p.is_file())),
            "hang_dumps": str(hang) if hang.is_dir() else None, "ray_logs": nodes}


def follow(job, path: Path, out: TextIO, *, poll_s: float = 1.0, state: Callable[[str], str] | None = None) -> int:
    """Print `path` as it grows until the job is no longer queued or running."""
    state = state or scheduler.job_state
    position = 0
    while True:
        try:
            alive = state(job.job_id) in _ACTIVE
        except scheduler.SlurmCommandError:
            alive = False
        if path.is_file():
            with open(path, "rb") as handle:
                handle.seek(position)
                chunk = handle.read()
                position = handle.tell()
            if chunk:
                out.write(chunk.decode(errors="replace"))
                out.flush()
        if not alive:
            return 0
        time.sleep(poll_s)


def build_parser():
    args = VerbArgs("logs", "beam-slurm logs RUN [--attempt N] [--node NAME] [--follow]: the batch log, the attempt's "
                    "logs and each node's Ray logs of a training job.\n\nRUN: the run folder (its export path), its "
                    "run name, or the training job's id.", settings=False)
    args.add_argument("run", metavar="RUN", help="run folder, run name or training job id")
    args.add_argument("--attempt", type=int, help="attempt number (default: the latest with logs)")
    args.add_argument("--node", help="one node: its ray-<node>.log and the tail of each of its Ray logs")
    args.add_argument("--follow", action="store_true",
                      help="keep printing the batch log (with --node: the node's ray-<node>.log) until the job ends")
    args.add_argument("--lines", type=int, default=40, help="lines shown from the end of each log")
    args.add_argument("--json", action="store_true", help="list the logs (paths, sizes, copy records) as JSON")
    args.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    return args


def main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse(argv).args
        job = find_job(args.run, args.exports_root)
    except (VerbUsageError, runs.RunNotFound) as exc:
        return parser.fail(exc)
    attempts = job.attempts()
    if not attempts:
        return parser.fail(f"job {job.job_id} has no log folder under {job.log_dir} yet (it has not started)")
    attempt = attempts[-1] if args.attempt is None else args.attempt
    if attempt not in attempts:
        return parser.fail(f"--attempt {attempt}: job {job.job_id} has logs of attempts "
                           f"{', '.join(map(str, attempts))}")
    if args.json:
        if args.follow:
            return parser.fail("--json and --follow: choose one")
        print(json.dumps(listing(job, attempt, args.node), indent=2))
        return 0
    if args.follow:
        if args.node:
            path: Path | None = job.attempt_dir(attempt) / f"ray-{args.node}.log"
        else:
            path, how = batch_log(job.job_id)
            if path is None:
                return parser.fail(f"cannot follow the batch log of job {job.job_id}: {how}")
        return follow(job, path, sys.stdout)
    return show(job, attempt, args.node, args.lines, sys.stdout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
