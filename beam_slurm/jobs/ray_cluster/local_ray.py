"""Start and stop this node's Ray processes for one job, without touching any other job's Ray: `ray start`'s
daemons escape Slurm's step tracking under proctrack/linuxproc; started as the leader of a new session, they share
one process group, and exactly that group is stopped (`ray stop` kills other jobs' Ray too, ray#12264).

The job's folder on the node (`<temp_dir_root>/ray-<job>-<attempt>-<random>`) is made fresh, 0700, under a name no
one can guess, so another user of the node can neither squat it nor hand the job a symlink; Ray's own temp dir is
`ray/` inside it: Ray makes its folders 0777, the 0700 parent keeps everyone else out of them all.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import stat
import string
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


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


def _members(field: int, value: int) -> list[int]:
    """PIDs of live (non-zombie) processes whose /proc stat field `field` (after the parenthesised command: state
    ppid pgrp session ...) is `value`."""
    pids = (int(entry) for entry in os.listdir("/proc") if entry.isdigit())
    return [pid for pid in pids if (fields := stat_fields(pid)) and fields[0] != "Z" and int(fields[field]) == value]


def group_members(pgid: int) -> list[int]:
    """PIDs of live (non-zombie) processes in process group `pgid`, from /proc."""
    return _members(2, pgid)


def session_members(sid: int) -> list[int]:
    """PIDs of live (non-zombie) processes in session `sid`: Ray's workers take their own process groups."""
    return _members(3, sid)


def _cmdline(pid: int) -> str:
    return proc_file(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace")


PGID_FILE = "beam-ray.pgid"
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")  # daemons with a `ray::` title, not workers
RAY_TEMP_DIR = "r"  # Ray's `--temp-dir`, inside the job's folder (short: Ray's socket paths below it are capped)
RANDOM_CHARS = 6  # of the job folder's name: 36**6 names, too many to plant them all
_NAME_CHARS = string.ascii_lowercase + string.digits
_NOFOLLOW_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def make_private_dir(root: Path, prefix: str) -> Path:
    """A new folder `<root>/<prefix><random>`, mode 0700, owned by this user, never one that existed before."""
    root.mkdir(parents=True, exist_ok=True)
    # mkdir never follows a link nor reuses a name that exists: a name planted by anyone is passed over.
    for _ in range(100):
        path = root / (prefix + "".join(secrets.choice(_NAME_CHARS) for _ in range(RANDOM_CHARS)))
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free name {prefix}* in {root} after 100 tries; check ray.temp_dir_root={root}")
    problem = not_private(path)
    if problem:
        raise PermissionError(f"the job's Ray folder {path} {problem}; check ray.temp_dir_root={root}")
    return path


def not_private(path: Path) -> str:
    """Why `path` is not a folder of this user's only ('' when it is); never follows a symlink."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.getuid():
        return f"belongs to uid {info.st_uid}, not to this job's user (uid {os.getuid()})"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return f"is open to others (mode {stat.S_IMODE(info.st_mode):o})"
    return ""


def write_new_file(path: Path, text: str, mode: int = 0o600) -> None:
    """Create `path` and write `text`: never through a symlink, never into a file that exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def read_own_file(path: Path) -> str:
    """The text of a regular file of this user's at `path` (not through a symlink); OSError otherwise."""
    fd = os.open(path, _NOFOLLOW_READ)
    with os.fdopen(fd, "r") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(f"{path} is not a file of this job's user")
        return handle.read()


def open_log(path: Path):
    """`path` opened to append (created with the umask's mode), never through a symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    return os.fdopen(fd, "ab")


class RayStartAbandoned(RuntimeError):
    """`ray start` stopped by its caller before it returned (what it waited for went away)."""


class LocalRay:
    """This job's Ray processes on this node."""

    def __init__(self, job_dir: Path, log_path: Path):
        self.job_dir = job_dir  # the job's 0700 folder on the node: the process-group id and Ray's temp dir
        self.temp_dir = job_dir / RAY_TEMP_DIR  # `--temp-dir`
        self.log_path = log_path  # receives `ray start`'s output
        self.pgid: int | None = None
        self._started_here = False

    @classmethod
    def create(cls, root: Path, prefix: str, log_path: Path | None = None) -> LocalRay:
        """A fresh job folder under `root` (see `make_private_dir`); `ray start`'s log in it unless given."""
        job_dir = make_private_dir(root, prefix)
        return cls(job_dir, log_path or job_dir / "ray-start.log")

    @property
    def _pgid_file(self) -> Path:
        return self.job_dir / PGID_FILE

    def start(
        self,
        ray_start_args: Sequence[str],
        env: Mapping[str, str],
        ray_executable: str,
        while_starting: Callable[[], bool | None] | None = None,
    ) -> None:
        """`ray start` in a new session; RuntimeError with the log tail; `while_starting()` True gives it up."""
        problem = not_private(self.job_dir)
        if problem:
            raise PermissionError(f"the job's Ray folder {self.job_dir} {problem}; Ray is not started in it")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open_log(self.log_path) as log:
            proc = subprocess.Popen(
                [ray_executable, "start", *ray_start_args],
                env=dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.pgid = proc.pid
            self._started_here = True
            self._pgid_file.unlink(missing_ok=True)  # a retried start's
            write_new_file(self._pgid_file, str(proc.pid))
            while proc.poll() is None:
                if while_starting is not None and while_starting():
                    self.stop(grace_s=2.0)
                    raise RayStartAbandoned(f"ray start given up while it ran (log: {self.log_path})")
                time.sleep(0.05)
            status = proc.returncode
        if status != 0:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-8:]
            self.stop(grace_s=2.0)
            raise RuntimeError(
                f"ray start exited with {status}; last lines of {self.log_path}:\n  " + "\n  ".join(tail)
            )

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

    def worker_processes(self) -> list[tuple[int, str]]:
        """(pid, title) of this Ray's worker processes on the node ('ray::GpuSlot.step', 'ray::IDLE'): the session's
        `ray::` processes but Ray's own agents. A driver's actors and tasks run in them."""
        if self.pgid is None:
            return []
        titles = ((pid, _cmdline(pid).strip()) for pid in session_members(self.pgid))
        return [(pid, title) for pid, title in titles if title.startswith("ray::") and title not in RAY_AGENTS]

    def stop(self, grace_s: float = 3.0) -> bool:
        """SIGTERM this job's Ray process group, SIGKILL whatever is left after `grace_s`; True if any was running."""
        if self.pgid is None:
            try:
                self.pgid = int(read_own_file(self._pgid_file))
            except (OSError, ValueError):
                return False
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

    def remove(self) -> None:
        """Delete the job's folder on the node (after Ray stopped and its logs were copied); symlinks inside are
        removed, never followed (shutil.rmtree works by directory descriptors on Linux)."""
        if not not_private(self.job_dir):
            shutil.rmtree(self.job_dir, ignore_errors=True)

    def _own_members(self) -> list[int]:
        """Members of the group; of one read back from a file, only if one uses this temp dir (a pgid may be reused)."""
        assert self.pgid is not None
        members = group_members(self.pgid)
        if members and not self._started_here and not any(str(self.job_dir) in _cmdline(pid) for pid in members):
            return []
        return members
