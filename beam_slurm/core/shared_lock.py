"""A lock file on shared storage that the next process can take over when its holder dies.

Why not flock/fcntl alone: on Lustre mounted with `localflock` and on BeeGFS without global file locks, a lock taken
on one node is invisible on another. This lock uses only operations atomic on NFS, Lustre, GPFS and BeeGFS alike:
`link()` to create it and `rename()` to break it. The holder writes its host, pid, process start time and a token,
and touches the file every `heartbeat`. A waiter takes over at once when the holder is on its host and gone (a
reused pid has another start time), or when the mtime did not change for `stale_after` seconds of the waiter's own
clock (so skew between nodes does not matter); a fresh lock renamed away by mistake is put back. A holder whose
heartbeat finds the file gone or another token sets `lost`; its work must still publish by atomic rename.

`try_acquire()` is the non-blocking form for "another one is running: refuse": it returns False as soon as the lock
proves live (its mtime or token changes, i.e. within one of the holder's heartbeats) and takes a stale one over
after `stale_after`, so a lock left by a killed holder does not refuse every later try.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


class LockTimeout(TimeoutError):
    """The lock stayed held by a live holder for longer than the caller wanted to wait."""


@dataclass(frozen=True)
class LockHolder:
    host: str  # Hostname of the holder
    pid: int  # Process id of the holder on that host
    pid_start: str  # so a reused pid is not taken for the holder
    token: str  # Random id of this acquisition
    acquired_at: float  # for messages only: clocks are never compared


def process_start_time(pid: int) -> str | None:
    """Start time of a local process in clock ticks since boot, or None if no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses; the fields after the last ')' are fixed.
    fields_after_name = stat[stat.rindex(")") + 2 :].split()
    return fields_after_name[19]  # field 22 overall


def _read_holder(path: Path) -> LockHolder | None:
    try:
        return LockHolder(**json.loads(path.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


class SharedFileLock:
    """Exclusive lock at `path` (a file on shared storage). Use as a context manager or acquire()/release()."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        stale_after: float = 120.0,
        heartbeat: float | None = None,
        poll_interval: float | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.stale_after = stale_after
        self.heartbeat = heartbeat if heartbeat is not None else max(0.2, stale_after / 6)
        self.poll_interval = poll_interval if poll_interval is not None else min(2.0, max(0.1, stale_after / 10))
        self.log = log if log is not None else logger.info  # takeovers are never silent
        self.lost = threading.Event()
        self._holder: LockHolder | None = None
        self._stop_heartbeat = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None

    def _new_holder(self) -> LockHolder:
        pid = os.getpid()
        return LockHolder(
            host=socket.gethostname(),
            pid=pid,
            pid_start=process_start_time(pid) or "",
            token=uuid.uuid4().hex,
            acquired_at=time.time(),
        )

    def _try_create(self) -> bool:
        holder = self._new_holder()
        scratch = self.path.with_name(f"{self.path.name}.new-{holder.token}")
        scratch.write_text(json.dumps(asdict(holder)))
        try:
            os.link(scratch, self.path)  # atomic create-if-absent, with the content already in place
            created = True
        except FileExistsError:
            created = False
        except OSError:
            # NFS may report an error for a link that did happen (lost reply); the link count tells the truth.
            created = scratch.stat().st_nlink == 2
        finally:
            scratch.unlink(missing_ok=True)
        if created:
            self._holder = holder
        return created

    def _stale_reason(self, holder: LockHolder | None, unchanged_for: float) -> str | None:
        if holder is not None and holder.host == socket.gethostname():
            start = process_start_time(holder.pid)
            if start is None:
                return f"holder pid {holder.pid} on {holder.host} is gone"
            if holder.pid_start and start != holder.pid_start:
                return f"holder pid {holder.pid} on {holder.host} is gone (pid reused)"
        if unchanged_for >= self.stale_after:
            who = f"pid {holder.pid} on {holder.host}" if holder else "unknown holder"
            return f"no heartbeat from {who} for {unchanged_for:.0f} s"
        return None

    def _break(self, judged: LockHolder | None, reason: str) -> None:
        tombstone = self.path.with_name(f"{self.path.name}.stale-{uuid.uuid4().hex}")
        try:
            os.rename(self.path, tombstone)
        except FileNotFoundError:
            return  # someone else broke or released it first
        moved = _read_holder(tombstone)
        if (moved.token if moved else None) != (judged.token if judged else None):
            # A fresh lock appeared between our check and the rename: give it back unless yet another exists.
            with contextlib.suppress(FileExistsError):
                os.link(tombstone, self.path)
        else:
            self.log(f"lock {self.path.name}: taking over, {reason}")
        tombstone.unlink(missing_ok=True)

    def acquire(self, timeout: float | None = None) -> None:
        """Wait until the lock is ours. Raises LockTimeout naming the holder after `timeout` seconds."""
        self._acquire(timeout, refuse_live=False)

    def try_acquire(self) -> bool:
        """Take the lock unless a live holder has it: False once the holder's heartbeat shows (within `heartbeat`
        plus one poll), True at once when free, or after `stale_after` when the holder is dead (taken over)."""
        return self._acquire(None, refuse_live=True)

    def _acquire(self, timeout: float | None, *, refuse_live: bool) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        last_seen: tuple[float, str | None] | None = None  # (mtime, token) of the lock file as last observed
        unchanged_since = time.monotonic()
        announced = False
        while True:
            if self._try_create():
                self.lost.clear()
                self._start_heartbeat()
                return True
            holder = _read_holder(self.path)
            try:
                mtime = self.path.stat().st_mtime
            except FileNotFoundError:
                continue  # released between our attempts: try again at once
            observed = (mtime, holder.token if holder else None)
            if observed != last_seen:
                if refuse_live and last_seen is not None:
                    return False  # the holder touched it (or another took it) while we watched: it is alive
                last_seen, unchanged_since = observed, time.monotonic()
            reason = self._stale_reason(holder, time.monotonic() - unchanged_since)
            if reason is not None:
                self._break(holder, reason)
                last_seen = None
                continue
            if not announced and holder is not None:
                doing = "watching its heartbeat" if refuse_live else "waiting"
                self.log(f"lock {self.path.name}: held by pid {holder.pid} on {holder.host}, {doing}")
                announced = True
            if deadline is not None and time.monotonic() >= deadline:
                who = f"pid {holder.pid} on {holder.host}" if holder else "an unknown holder"
                raise LockTimeout(f"{self.path} still held by {who} after {timeout:.0f} s")
            time.sleep(self.poll_interval)

    def still_held(self) -> bool:
        """True when the lock file on disk is still ours (checked before publishing work)."""
        current = _read_holder(self.path)
        return self._holder is not None and current is not None and current.token == self._holder.token

    def _start_heartbeat(self) -> None:
        self._stop_heartbeat.clear()
        self._heartbeat_thread = threading.Thread(target=self._beat, name="lock-heartbeat", daemon=True)
        self._heartbeat_thread.start()

    def _beat(self) -> None:
        while not self._stop_heartbeat.wait(self.heartbeat):
            if not self.still_held():
                self.log(f"lock {self.path.name}: lost (another process took it over)")
                self.lost.set()
                return
            try:
                os.utime(self.path)
            except FileNotFoundError:
                self.lost.set()
                return

    def release(self) -> None:
        self._stop_heartbeat.set()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join()
            self._heartbeat_thread = None
        if self.still_held():
            self.path.unlink(missing_ok=True)
        self._holder = None

    def __enter__(self) -> SharedFileLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
