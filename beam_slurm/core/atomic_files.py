"""Atomic file writes: a temporary file in the same folder, flushed to disk, then renamed over the target.

Readers on any node of a shared filesystem see the old file or the new one; a crash leaves at most a hidden
`.<name>.*.tmp`. Standard library only: the trainer side imports this on Python 3.11 and 3.12. Files get the user's
umask (a team reads the reports on shared storage); secrets are written elsewhere (`beam_slurm.jobs.ray_cluster.auth`,
0600).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary sibling of `path` for writing; on a clean exit it replaces `path`, on an error it vanishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: its 0600 would hide the file from the group whatever the umask says.
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def temporary_sibling(final: str | os.PathLike[str]) -> Path:
    """A hidden sibling of `final` (same filesystem, so the rename is atomic), unique per process."""
    final = Path(final)
    return final.with_name(f".{final.name}.tmp-{os.getpid()}")


def publish(temporary: str | os.PathLike[str], final: str | os.PathLike[str]) -> None:
    """Flush the finished `temporary` to disk and rename it over `final` in one step."""
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, final)


def sync_directory(directory: str | os.PathLike[str]) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_writer(path) as handle:
        handle.write(text)


def write_json(path: str | os.PathLike[str], payload: Any, *, indent: int | None = None) -> None:
    """Replace `path` with `payload` as JSON (sorted keys, trailing newline) atomically."""
    write_text(path, json.dumps(payload, sort_keys=True, indent=indent) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """Parsed JSON, or None when the file is missing or unreadable (the files written here appear whole)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
