"""The checks a maintainer runs before a commit pass on the tree: ruff's lint and format check, and mypy (configured in
pyproject.toml, strict on core/, config/ and policy/), each run from the project's venv as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["beam_slurm", "stages", "docs"]


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    program = Path(sys.executable).with_name(tool)
    return subprocess.run([str(program), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args", [["check", *CHECKED], ["format", "--check", *CHECKED]], ids=["check", "format"])
def test_ruff(args):
    done = run("ruff", *args)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_mypy(tmp_path):
    # A cache of its own: the suite's run never reads a stale cache a developer's edits left behind.
    done = run("mypy", "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
