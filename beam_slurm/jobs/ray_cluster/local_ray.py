"""Start and stop this node's Ray processes for one job, without touching any other job's Ray: `ray start`'s
daemons escape Slurm's step tracking under proctrack/linuxproc; started as the leader of a new session, they share
one process group, and exactly that group is stopped (`ray stop` kills other jobs' Ray too, ray#12264).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence


def proc_file(pid: int, name: str) -> bytes:
    """/proc/<pid>/<name>, b'' when the process is gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses); [] when the process is gone."""
    stat = proc_file(pid, "stat").decode(errors="replace")
    return stat.rsplit(")", 1)[1].split() if ")" in stat else []


def group_members(pgid: int) -> list[int]:
    """PIDs of live (non-zombie) processes in process group `pgid`, from /proc."""
    pids = (int(entry) for entry in os.listdir("/proc") if entry.isdigit())
    # Fields after the parenthesised command: state ppid pgrp ...
    return [pid for pid in pids if (fields := stat_fields(pid)) and fields[0] != "Z" and int(fields[2]) == pgid]


def _cmdline(pid: int) -> str:
    return proc_file(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace")


class RayStartAbandoned(RuntimeError):
    """`ray start` stopped by its caller before it returned (what it waited for went away)."""


class LocalRay:
    """This job's Ray processes on this node."""

    def __init__(self, temp_dir: Path, log_path: Path):
        self.temp_dir = temp_dir  # `--temp-dir`, also holding the process-group id
        self.log_path = log_path  # receives `ray start`'s output
        self.pgid: int | None = None
        self._started_here = False

    @property
    def _pgid_file(self) -> Path:
        return self.temp_dir / "beam-ray.pgid"

    def start(self, ray_start_args: Sequence[str], env: Mapping[str, str], ray_executable: str,
              while_starting: Callable[[], bool | None] | None = None) -> None:
        """`ray start` in a new session; RuntimeError with the log tail; `while_starting()` True gives it up."""
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen([ray_executable, "start", *ray_start_args], env=dict(env), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            self.pgid = proc.pid
            self._started_here = True
            self._pgid_file.write_text(str(proc.pid))
            while proc.poll() is None:
                if while_starting is not None and while_starting():
                    self.stop(grace_s=2.0)
                    raise RayStartAbandoned(f"ray start given up while it ran (log: {self.log_path})")
                time.sleep(0.05)
            status = proc.returncode
        if status != 0:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-8:]
            self.stop(grace_s=2.0)
            raise RuntimeError(f"ray start exited with {status}; last lines of {self.log_path}:\n  " + "\n  ".join(tail))

    def process_pid(self, needle: str) -> int | None:
        """PID of the first process of this job's Ray whose command line contains `needle` (e.g. '/raylet')."""
        if self.pgid is None:
            return None
        for pid in group_members(self.pgid):
            if needle in _cmdline(pid):
                return pid
        return None

    def alive(self, needles: Sequence[str] = ("/raylet/raylet",)) -> bool:
        """True while every named process (the raylet by default; add 'gcs_server' on the head) is running."""
        return all(self.process_pid(needle) is not None for needle in needles)

    def stop(self, grace_s: float = 3.0) -> bool:
        """SIGTERM this job's Ray process group, SIGKILL whatever is left after `grace_s`; True if any was running."""
        if self.pgid is None and self._pgid_file.exists():
            self.pgid = int(self._pgid_file.read_text())
        if self.pgid is None:
            return False
        was_running = bool(self._own_members())
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
            if not self._own_members():
                break
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self._own_members():
                time.sleep(0.2)
        return was_running

    def _own_members(self) -> list[int]:
        """Members of the group; of one read back from a file, only if one uses this temp dir (a pgid may be reused)."""
        assert self.pgid is not None
        members = group_members(self.pgid)
        if members and not self._started_here and not any(str(self.temp_dir) in _cmdline(pid) for pid in members):
            return []
        return members
