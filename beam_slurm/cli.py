"""The `beam-slurm` command: one verb, then its arguments. Each verb's module is imported only when used, so `beam-slurm
plan` never pays for Ray, torch or vLLM imports."""

from __future__ import annotations

import errno
import importlib
import os
import sys

from beam_slurm import __version__
from beam_slurm.slurm.scheduler import SlurmUnreachable

# verb -> one-line help. Each verb's code is `main(argv) -> exit code` in beam_slurm/verbs/<verb>.py, named after it
# (`prepare-data` -> verbs/prepare_data.py).
VERBS: dict[str, str] = {
    "plan": "print the resource plan and the SkyRL command; validate the recipe",
    "doctor": "what the cluster's Slurm settings mean for the recipe: verdicts and fixes",
    "prepare-data": "build the cleaned DAPO-Math-17K / AIME parquet files",
    "train": "run inside a Slurm allocation: Ray across nodes, then SkyRL",
    "evaluate": "evaluate a checkpoint on AIME with vLLM",
    "grade": "grade pre-generated responses (JSONL) and write metrics",
    "report": "table and plots of a run's evaluations",
    "submit": "submit the stage chain (or a -m sweep) as Slurm jobs",
    "status": "status of a run or sweep",
    "sync": "upload a run's offline W&B folders into its one W&B run",
    "requeue": "save at the next step, then requeue a running job",
    "stop": "save at the next step, then stop a running job (resumable)",
    "cancel": "cancel a run's or a sweep's queued and running jobs",
    "attach": "a shell (or -- CMD) on a node of a running job, with its Ray address",
    "logs": "a job's batch log, attempt logs and every node's Ray logs",
    "pull-container": "import the recipe's image once to shared storage",
}


def verb_module(verb: str) -> str:
    return "beam_slurm.verbs." + verb.replace("-", "_")


CLOSED_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away (`| head`)


def _usage() -> str:
    lines = ["usage: beam-slurm [--version] <verb> [--help] [args...]", "", "verbs:"]
    lines += [f"  {verb:<15} {help_}" for verb, help_ in VERBS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(_usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] == "--version":
        print(f"beam-slurm {__version__}")
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"beam-slurm: unknown verb {verb!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    func = importlib.import_module(verb_module(verb)).main
    try:
        try:
            return int(func(rest) or 0)
        finally:
            sys.stdout.flush()  # here, not at exit: a reader gone by now is a closed pipe too
    except BrokenPipeError:
        return _closed_pipe()
    except SlurmUnreachable as outage:  # a daemon down is not the user's error (2) and no bug (a traceback)
        print(f"beam-slurm {verb}: {outage}", file=sys.stderr)
        return 1
    except OSError as error:  # a path typed as an input (settings are checked by name before this)
        if error.errno != errno.ENAMETOOLONG:
            raise
        print(
            f"beam-slurm {verb}: {error.filename}: a folder or file name in it is longer than the file system takes "
            f"({error.strerror}); shorten it",
            file=sys.stderr,
        )
        return 2
    except SystemExit as stop:  # rich's Console exits 1 on a closed pipe, from inside its `except BrokenPipeError`
        if isinstance(stop.__context__, BrokenPipeError):
            return _closed_pipe()
        raise


def _closed_pipe() -> int:
    """End quietly: stdout points at /dev/null so the interpreter's last flush cannot raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE


if __name__ == "__main__":
    sys.exit(main())
