"""The site's setup lines (`cluster.setup`, e.g. `module load cuda/12.8`) run by the batch shell before the training
job's Python: the recipe says them, and only Python reads the recipe, so the job's Python hands itself to a bash that
runs them and then starts the same command again, with what they exported (srun passes it to every node's step)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

SETUP_DONE_ENV = "BEAM_SITE_SETUP_DONE"
"""Set once the setup lines ran, so the command started again after them does not run them twice."""


def needed(lines: Sequence[str], environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return bool(lines) and environ.get(SETUP_DONE_ENV) != "1"


def script(lines: Sequence[str]) -> str:
    """bash text: the lines, each a failure that stops the job before Python starts, then the command again."""
    numbered = "\n".join(str(line) for line in lines)
    return (
        "set -e\n"
        "trap 'echo \"[beam-slurm train] cluster.setup failed (exit $?) before the job started; fix the site "
        "profile or cluster.setup\" >&2' ERR\n"
        f"{numbered}\n"
        "trap - ERR\n"
        'exec "$@"\n'
    )


def exec_after_setup(lines: Sequence[str], command: Sequence[str] | None = None) -> NoReturn:
    """Replace this process by bash running `lines`, then `command` (default: this process's own command line)."""
    again = list(command) if command is not None else [sys.executable, *sys.orig_argv[1:]]
    os.environ[SETUP_DONE_ENV] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp("bash", ["bash", "-c", script(lines), "beam-site-setup", *again])
