"""The per-job private folder on shared storage, `<state_dir>/jobs/<jobid>/` (0700), and the Ray auth token in it
(0600, made once per job, reused by its requeued attempts; Ray reads it from RAY_AUTH_TOKEN_PATH, never argv)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from pathlib import Path

from beam_slurm.config.ray import RaySettings

TOKEN_FILE = "ray_auth_token"


def job_dir(settings: RaySettings, job_id: str | int) -> Path:
    """The job's private folder (not created)."""
    return Path(settings.resolved_state_dir()) / "jobs" / str(job_id)


def ensure_job_dir(settings: RaySettings, job_id: str | int) -> Path:
    """Create the job folder readable only by the user (and its parents), and return it."""
    path = job_dir(settings, job_id)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def _check_private(path: Path) -> None:
    info = path.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to uid {info.st_uid}, not to you; remove it and resubmit")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise PermissionError(
            f"{path} is readable by others (mode {stat.S_IMODE(info.st_mode):o}); "
            f"remove it and resubmit so a new token is made"
        )


def ensure_token(settings: RaySettings, job_id: str | int) -> Path:
    """The job's token file, created (0600, atomically) if missing. Concurrent callers end with one token."""
    folder = ensure_job_dir(settings, job_id)
    path = folder / TOKEN_FILE
    if path.exists():
        _check_private(path)
        return path
    tmp = folder / f".{TOKEN_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process won the race: the first token stays the only one
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _check_private(path)
    return path


def auth_env(settings: RaySettings, token_path: Path | None) -> dict[str, str]:
    """Environment that makes Ray processes and clients use the token (empty when auth is off)."""
    if not settings.auth:
        return {}
    if token_path is None:
        raise ValueError("ray.auth is on but no token file was given")
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


def remove_stale_job_dir(settings: RaySettings, job_id: str | int) -> bool:
    """At a first attempt: delete what an earlier job of the same id left (its rendezvous); True if there was one."""
    if not job_dir(settings, job_id).exists():
        return False
    remove_job_dir(settings, job_id)
    return True


def remove_job_dir(settings: RaySettings, job_id: str | int) -> None:
    """Delete the job folder (token and rendezvous files) once the job will not run again."""
    shutil.rmtree(job_dir(settings, job_id), ignore_errors=True)
