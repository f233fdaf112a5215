"""Copy this node's Ray session logs to shared storage: `<log_dir>/<jobid>-<attempt>/ray/<node>/`.

Ray's logs live in the node-local temp dir, lost with the node (Ray issues 40628, 28876): each node copies them
periodically and once more after its Ray stopped (docs: guides/operations.md, "`logs`"); `COPY.json` says what a
copy did. The copy reads through directory descriptors and O_NOFOLLOW only, takes only this user's regular files,
never the job's token, and writes new files (O_EXCL) with the umask's mode: what the logs hold is all that reaches
shared storage.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from beam_slurm.config.job_spec import LogCopySettings
from beam_slurm.core.atomic_files import write_json

logger = logging.getLogger(__name__)
COPY_RECORD = "COPY.json"  # the node folder's record of the last copy
RAY_LOGS_DIR = "ray"  # in the attempt's log folder, one folder per node
_CHUNK = 1 << 20


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class LogFile:
    """One log found under a session's logs/: read later by name relative to its folder's descriptor, so a folder
    swapped for a symlink after the listing changes nothing."""

    parts: tuple[str, ...]  # where it goes in the copy: (session_x, sub, ..., name)
    dir_fd: int
    mtime: float
    size: int

    @property
    def relative(self) -> str:
        return "/".join(self.parts)


class _Tree:
    """The session logs of a Ray temp dir, walked by directory descriptors (openat-style, O_NOFOLLOW at every step):
    symlinks are never followed, folders and files not this user's are skipped and named in `skipped`."""

    def __init__(self, uid: int):
        self.uid = uid
        self.fds: list[int] = []
        self.skipped: list[str] = []

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def open_dir(self, name: str, dir_fd: int | None, shown: str) -> int | None:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file where a folder was
            self.skipped.append(f"{shown}: not a folder ({exc.strerror})")
            return None
        self.fds.append(fd)
        owner = os.fstat(fd).st_uid
        if owner != self.uid:
            self.skipped.append(f"{shown}/: belongs to uid {owner}, not to this job's user")
            return None
        return fd

    def files(self, temp_dir: Path) -> list[LogFile]:
        """Every log file under `<temp dir>/session_*/logs/`, newest first (session_latest, a link, is not taken)."""
        found: list[LogFile] = []
        root = self.open_dir(str(temp_dir), None, str(temp_dir))
        if root is None:
            return found
        for entry in sorted(os.scandir(root), key=lambda e: e.name):
            if not entry.name.startswith("session_") or entry.is_symlink():
                continue
            session = self.open_dir(entry.name, root, entry.name)
            logs = session is not None and self.open_dir("logs", session, f"{entry.name}/logs")
            if logs:
                self._collect(logs, (entry.name,), found)
        return sorted(found, key=lambda f: f.mtime, reverse=True)

    def _collect(self, dir_fd: int, parts: tuple[str, ...], found: list[LogFile]) -> None:
        for entry in os.scandir(dir_fd):
            shown = "/".join((*parts, entry.name))
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # a worker's log removed while we look
            if stat.S_ISDIR(info.st_mode):
                sub = self.open_dir(entry.name, dir_fd, shown)
                if sub is not None:
                    self._collect(sub, (*parts, entry.name), found)
            elif not stat.S_ISREG(info.st_mode):
                self.skipped.append(f"{shown}: not a regular file" + (" (a symlink)" if entry.is_symlink() else ""))
            elif info.st_uid != self.uid:
                self.skipped.append(f"{shown}: belongs to uid {info.st_uid}, not to this job's user")
            else:
                found.append(LogFile((*parts, entry.name), dir_fd, info.st_mtime, info.st_size))


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def copy_logs(
    temp_dir: Path,
    dest: Path,
    max_bytes: int,
    *,
    reason: str,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    private: Sequence[Path] = (),
) -> dict:
    """Copy the node's Ray logs to `dest`, newest first, up to `max_bytes` and `deadline`; what was done (COPY.json).
    Nothing is read through a symlink, nor a file of another user, nor one of `private` (the job's token)."""
    dest.mkdir(parents=True, exist_ok=True)
    started = time.time()
    used = copied = kept = truncated = 0
    left_out: list[str] = []
    wanted: set[tuple[str, ...]] = set()
    finished = True
    never = {identity for identity in map(_identity, private) if identity is not None}
    tree = _Tree(os.getuid())
    dest_fd = os.open(dest, _DIR_FLAGS)
    try:
        for source in tree.files(temp_dir):
            if deadline is not None and clock() > deadline:
                finished = False
                left_out.append(source.relative)
                continue
            room = max_bytes - used
            if room <= 0:
                left_out.append(source.relative)
                continue
            try:
                fd = os.open(source.parts[-1], _READ_FLAGS, dir_fd=source.dir_fd)
            except OSError:
                continue  # removed (or replaced by a symlink) since the listing
            with os.fdopen(fd, "rb") as src:
                info = os.fstat(fd)
                refusal = _refusal(info, tree.uid, never)
                if refusal:
                    tree.skipped.append(f"{source.relative}: {refusal}")
                    continue
                size = min(info.st_size, room)
                wanted.add(source.parts)
                if size < info.st_size or not _same(dest_fd, source.parts, info):
                    try:
                        _copy_tail(src, dest_fd, source.parts, size, info.st_mtime)
                    except OSError:
                        left_out.append(source.relative)
                        wanted.discard(source.parts)
                        continue
                    copied += 1
                    truncated += size < info.st_size
                else:
                    kept += 1
                used += size
        removed = _remove_other_files(dest_fd, (), wanted)
    finally:
        tree.close()
        os.close(dest_fd)
    summary = {
        "reason": reason,
        "time": started,
        "seconds": round(time.time() - started, 3),
        "finished": finished,
        "bytes": used,
        "max_bytes": max_bytes,
        "files_copied": copied,
        "files_unchanged": kept,
        "files_cut_to_their_tail": truncated,
        "files_left_out": len(left_out),
        "left_out": left_out[:50],
        "stale_removed": removed,
        "skipped": tree.skipped[:50],
    }
    write_json(dest / COPY_RECORD, summary, indent=1)
    return summary


def _refusal(info: os.stat_result, uid: int, never: set[tuple[int, int]]) -> str:
    """Why an opened file is not copied ('' when it is)."""
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != uid:
        return f"belongs to uid {info.st_uid}, not to this job's user"
    if (info.st_dev, info.st_ino) in never:
        return "a private file of the job"
    if info.st_nlink > 1:
        return "has other names (hard links): one may be a private file"  # Ray's logs have one name each
    return ""


def _dest_dir(dest_fd: int, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of dest/<parts>, each folder opened without following symlinks (made when `create`)."""
    fd = os.dup(dest_fd)
    for name in parts:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=fd)  # the umask's mode, as the operations guide says
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def _same(dest_fd: int, parts: tuple[str, ...], info: os.stat_result) -> bool:
    try:
        folder = _dest_dir(dest_fd, parts[:-1], create=False)
    except OSError:
        return False
    try:
        mine = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(folder)
    return stat.S_ISREG(mine.st_mode) and mine.st_size == info.st_size and int(mine.st_mtime) == int(info.st_mtime)


def _copy_tail(src, dest_fd: int, parts: tuple[str, ...], size: int, mtime: float) -> None:
    """The last `size` bytes of `src` into dest/<parts> (whole file when size is its length), then its mtime: a new
    file (O_EXCL, O_NOFOLLOW, the umask's mode) renamed over the old copy in the same folder."""
    folder = _dest_dir(dest_fd, parts[:-1], create=True)
    tmp = f".{parts[-1]}.{secrets.token_hex(6)}.tmp"
    try:
        out_fd = os.open(tmp, _WRITE_FLAGS, 0o666, dir_fd=folder)
        try:
            with os.fdopen(out_fd, "wb") as out:
                src.seek(0, os.SEEK_END)
                src.seek(max(src.tell() - size, 0))
                remaining = size
                while remaining > 0:
                    chunk = src.read(min(_CHUNK, remaining))
                    if not chunk:
                        break
                    out.write(chunk)
                    remaining -= len(chunk)
                out.flush()
                os.utime(out.fileno(), (mtime, mtime))
            os.replace(tmp, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def _remove_other_files(dir_fd: int, parts: tuple[str, ...], wanted: set[tuple[str, ...]]) -> int:
    """Files of an earlier copy that fell out of the bound (the node's folder stays within it); links are removed,
    never followed."""
    removed = 0
    for entry in os.scandir(dir_fd):
        here = (*parts, entry.name)
        if entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):
                sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                try:
                    removed += _remove_other_files(sub, here, wanted)
                finally:
                    os.close(sub)
        elif here != (COPY_RECORD,) and here not in wanted and not entry.name.startswith("."):
            with contextlib.suppress(OSError):
                os.unlink(entry.name, dir_fd=dir_fd)
                removed += 1
    return removed


class LogCopier:
    """The periodic copy in a thread, and the last copy at the end of the attempt."""

    def __init__(
        self,
        temp_dir: Path,
        attempt_dir: Path | None,
        host: str,
        settings: LogCopySettings,
        private: Sequence[Path] = (),
    ):
        self.temp_dir = temp_dir
        self.private = list(private)  # files that must never reach the copy (the job's token)
        self._said: set[str] = set()  # skipped files already named in the log
        self.dest = attempt_dir / RAY_LOGS_DIR / host if attempt_dir is not None else None
        self.settings = settings
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def copy(self, reason: str, deadline: float | None = None) -> dict | None:
        if self.dest is None:
            return None
        with self._lock:
            try:
                summary = copy_logs(
                    self.temp_dir,
                    self.dest,
                    self.settings.max_bytes,
                    reason=reason,
                    deadline=deadline,
                    private=self.private,
                )
            except OSError as exc:
                logger.info(f"copying the Ray logs to {self.dest} failed: {exc}")
                return None
            for line in summary["skipped"]:
                if line not in self._said:
                    self._said.add(line)
                    logger.info(f"Ray log copy: skipped {line}")
            return summary

    def start(self) -> None:
        """Copy now (Ray just came up), then every interval_s until `finish`."""
        if self.dest is None or self._thread is not None or self.settings.interval_s <= 0:
            return

        def loop() -> None:
            while True:
                self.copy("periodic")
                if self._stop.wait(self.settings.interval_s):
                    return

        self._thread = threading.Thread(target=loop, name="ray-log-copy", daemon=True)
        self._thread.start()

    def finish(self, reason: str) -> None:
        """The last copy, after this node's Ray stopped; bounded by final_s (cluster.log_copy_s)."""
        deadline = time.monotonic() + self.settings.final_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.final_s)
        summary = self.copy(reason, deadline=deadline)
        if summary is None:
            return
        note = "" if summary["finished"] else f"; stopped after cluster.log_copy_s={self.settings.final_s:g}s"
        left = f", {summary['files_left_out']} older files left out" if summary["files_left_out"] else ""
        logger.info(
            f"Ray logs copied to {self.dest} ({summary['bytes'] / 1e6:.1f} MB in {summary['seconds']:.1f}s{left}{note})"
        )
