"""Copy this node's Ray session logs to shared storage: `<log_dir>/<jobid>-<attempt>/ray/<node>/`.

Ray's logs live in the node-local temp dir, lost with the node (Ray issues 40628, 28876): each node copies them
periodically and once more after its Ray stopped (README, "While it runs"); `COPY.json` says what a copy did.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Callable

from beam_slurm.config.job_spec import LogCopySettings
from beam_slurm.core.atomic_files import atomic_writer, write_json

COPY_RECORD = "COPY.json"  # the node folder's record of the last copy
RAY_LOGS_DIR = "ray"  # in the attempt's log folder, one folder per node
_CHUNK = 1 << 20


def session_log_files(temp_dir: Path) -> list[Path]:
    """Every file under `<temp dir>/session_*/logs/`, newest first (session_latest is a link to one of them)."""
    found: list[tuple[float, Path]] = []
    for session in temp_dir.glob("session_*"):
        if session.is_symlink() or not (session / "logs").is_dir():
            continue
        for path in (session / "logs").rglob("*"):
            try:
                if path.is_file() and not path.is_symlink():
                    found.append((path.stat().st_mtime, path))
            except OSError:
                continue  # a worker's log removed while we look
    return [path for _, path in sorted(found, key=lambda item: item[0], reverse=True)]


def copy_logs(temp_dir: Path, dest: Path, max_bytes: int, *, reason: str, deadline: float | None = None,
              clock: Callable[[], float] = time.monotonic) -> dict:
    """Copy the node's Ray logs to `dest`, newest first, up to `max_bytes` and `deadline`; what was done (COPY.json)."""
    dest.mkdir(parents=True, exist_ok=True)
    started = time.time()
    used = copied = kept = truncated = 0
    left_out: list[str] = []
    wanted: set[Path] = set()
    finished = True
    for source in session_log_files(temp_dir):
        relative = source.relative_to(temp_dir)
        target = dest.joinpath(relative.parts[0], *relative.parts[2:])  # session_x/logs/... -> session_x/...
        if deadline is not None and clock() > deadline:
            finished = False
            left_out.append(str(relative))
            continue
        try:
            info = source.stat()
        except OSError:
            continue
        room = max_bytes - used
        if room <= 0:
            left_out.append(str(relative))
            continue
        wanted.add(target)
        size = min(info.st_size, room)
        if size < info.st_size or not _same(target, info):
            try:
                _copy_tail(source, target, size, info.st_mtime)
            except OSError:
                left_out.append(str(relative))
                wanted.discard(target)
                continue
            copied += 1
            truncated += size < info.st_size
        else:
            kept += 1
        used += size
    removed = _remove_other_files(dest, wanted)
    summary = {"reason": reason, "time": started, "seconds": round(time.time() - started, 3), "finished": finished,
               "bytes": used, "max_bytes": max_bytes, "files_copied": copied, "files_unchanged": kept,
               "files_cut_to_their_tail": truncated, "files_left_out": len(left_out),
               "left_out": left_out[:50], "stale_removed": removed}
    write_json(dest / COPY_RECORD, summary, indent=1)
    return summary


def _same(target: Path, info: os.stat_result) -> bool:
    try:
        mine = target.stat()
    except OSError:
        return False
    return mine.st_size == info.st_size and int(mine.st_mtime) == int(info.st_mtime)


def _copy_tail(source: Path, target: Path, size: int, mtime: float) -> None:
    """The last `size` bytes of `source` into `target` (whole file when size is its length), then its mtime."""
    with open(source, "rb") as src, atomic_writer(target, "wb") as out:
        src.seek(0, os.SEEK_END)
        src.seek(max(src.tell() - size, 0))
        remaining = size
        while remaining > 0:
            chunk = src.read(min(_CHUNK, remaining))
            if not chunk:
                break
            out.write(chunk)
            remaining -= len(chunk)
    os.utime(target, (mtime, mtime))


def _remove_other_files(dest: Path, wanted: set[Path]) -> int:
    """Files of an earlier copy that fell out of the bound (the node's folder stays within it)."""
    removed = 0
    for path in dest.rglob("*"):
        if path.is_file() and path.name != COPY_RECORD and path not in wanted:
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
    return removed


class LogCopier:
    """The periodic copy in a thread, and the last copy at the end of the attempt."""

    def __init__(self, temp_dir: Path, attempt_dir: Path | None, host: str, settings: LogCopySettings,
                 log: Callable[[str], None]):
        self.temp_dir = temp_dir
        self.dest = attempt_dir / RAY_LOGS_DIR / host if attempt_dir is not None else None
        self.settings = settings
        self.log = log
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def copy(self, reason: str, deadline: float | None = None) -> dict | None:
        if self.dest is None:
            return None
        with self._lock:
            try:
                return copy_logs(self.temp_dir, self.dest, self.settings.max_bytes, reason=reason, deadline=deadline)
            except OSError as exc:
                self.log(f"copying the Ray logs to {self.dest} failed: {exc}")
                return None

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
        self.log(f"Ray logs copied to {self.dest} ({summary['bytes'] / 1e6:.1f} MB in {summary['seconds']:.1f}s"
                 f"{left}{note})")
