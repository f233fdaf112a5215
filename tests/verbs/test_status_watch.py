"""`status --watch` ends its output with a newline into a log or a pipe as on a terminal, so what the shell prints next
starts a line of its own. No Slurm here: the run's stages are skipped ones, so the watch ends at its first look."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

from test_status_labels import _run

from beam_slurm.cli import main as beam_slurm

REPO = Path(__file__).resolve().parents[2]
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def test_watch_into_a_log_ends_with_a_newline(tmp_path, capsys):
    export = _run(tmp_path, "watched", [])
    assert beam_slurm(["status", str(export), "--watch", "--interval", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "run watched" in out and out.endswith("\n") and not out.endswith("\n\n")


def test_watch_on_a_terminal_ends_its_line_once(tmp_path):
    export = _run(tmp_path, "watched", [])
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    try:
        done = subprocess.Popen([sys.executable, "-m", "beam_slurm.cli", "status", str(export), "--watch"],
                                stdin=follower, stdout=follower, stderr=subprocess.PIPE, cwd=REPO, env=env)
        os.close(follower)
        chunks = []
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            try:
                chunk = os.read(leader, 65536) if ready else b""
            except OSError:  # the child closed the terminal (EIO on Linux)
                chunk = b""
            if not chunk:
                break
            chunks.append(chunk)
        assert done.wait(timeout=60) == 0, done.stderr.read() if done.stderr else ""
    finally:
        os.close(leader)
    text = _CONTROL.sub("", b"".join(chunks).decode(errors="replace")).replace("\r\n", "\n")
    assert "run watched" in text and text.endswith("\n") and not text.endswith("\n\n"), repr(text[-200:])
