"""`beam-slurm pull-container`: import the recipe's image once into shared storage (`import_command`).

Every node and later job then runs the file. Racing jobs: one takes the lock on shared storage (taken over when its
holder dies), imports to a temporary name and renames it into place; the others wait. The digest record beside the
file is written last, so "record present and matching" means complete. Nothing here reads registry credentials.
"""

from __future__ import annotations

import json
import logging
import shlex
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from beam_slurm.config.container import ContainerSettings
from beam_slurm.config.container_runtime import (
    cached_image_path,
    digest_record_path,
    docker_reference,
    enroot_reference,
    is_local_image,
    validate,
)
from beam_slurm.core.atomic_files import publish, read_json, write_text
from beam_slurm.core.shared_lock import LockTimeout, SharedFileLock
from beam_slurm.jobs.data.manifest import sha256_file

logger = logging.getLogger(__name__)
RUNTIME_EXECUTABLE = {"pyxis": "enroot", "apptainer": "apptainer"}


def import_command(runtime: str, image: str, output: Path, executable: str | None = None) -> list[str]:
    """The runtime's own import command writing `output` (argv; the reference carries no credentials)."""
    executable = executable or RUNTIME_EXECUTABLE[runtime]
    if runtime == "pyxis":
        return [executable, "import", "-o", str(output), "docker://" + enroot_reference(image)]
    if runtime == "apptainer":
        return [executable, "pull", str(output), "docker://" + docker_reference(image)]
    raise ValueError(f"no image import for runtime {runtime!r}")


def pinned_digest(image: str) -> str | None:
    """The registry digest a reference pins (`...@sha256:<hex>`), else None (a tag can move)."""
    _, sep, digest = image.partition("@")
    return digest if sep and digest.startswith("sha256:") else None


def record_matches(settings: ContainerSettings, image_path: Path, *, verify: bool = False) -> bool:
    """`image_path` is a complete import of settings.image, as its record says (with `verify`, re-hashed too)."""
    record = read_json(digest_record_path(image_path))
    if record is None or not image_path.is_file():
        return False
    wanted = {
        "image": docker_reference(settings.image),
        "runtime": settings.runtime,
        "size": image_path.stat().st_size,
        "registry_digest": pinned_digest(settings.image),
    }
    return all(record.get(key) == value for key, value in wanted.items()) and (
        not verify or record.get("sha256") == "sha256:" + sha256_file(image_path)
    )


def image_is_current(settings: ContainerSettings) -> bool:
    """For the pipeline's skip logic: nothing to pull (runtime none, local image file, or a complete import)."""
    if settings.runtime == "none" or is_local_image(settings.image):
        return True
    target = cached_image_path(settings)
    return target is not None and record_matches(settings, target)


def _write_record(settings: ContainerSettings, image_path: Path, sha256: str) -> None:
    record = {
        "image": docker_reference(settings.image),
        "runtime": settings.runtime,
        "file": image_path.name,
        "size": image_path.stat().st_size,
        "sha256": sha256,
        "registry_digest": pinned_digest(settings.image),
        "imported_at": time.time(),
        "imported_on": socket.gethostname(),
    }
    write_text(digest_record_path(image_path), json.dumps(record, indent=2) + "\n")


@dataclass
class PullResult:
    """What a pull did."""

    image_path: Path  # The image file in the cache directory
    action: str  # skipped (already complete), imported, or imported-by-other (while this one waited for the lock)


class PullError(RuntimeError):
    """The import failed (runtime error, lock timeout); the message says what happened."""


def _run_import(command: list[str], lock: SharedFileLock) -> int | None:
    """Run the import; return its exit status, or None if we lost the lock meanwhile (then it was stopped)."""
    logger.info("running " + shlex.join(command))
    with subprocess.Popen(command, stdin=subprocess.DEVNULL) as process:
        while True:
            try:
                return process.wait(timeout=lock.heartbeat)
            except subprocess.TimeoutExpired:
                if lock.lost.is_set():
                    process.terminate()
                    try:
                        process.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        process.kill()
                    return None


def pull_image(
    settings: ContainerSettings, *, force: bool = False, verify: bool = False, executable: str | None = None
) -> PullResult:
    """Import settings.image into settings.image_cache_dir unless a complete import is already there."""
    target = cached_image_path(settings)
    if target is None:
        raise PullError("nothing to pull: the image is a local file or no cache directory is set")
    started = time.time()
    if not force and record_matches(settings, target, verify=verify):
        logger.info(f"{target} is complete (digest record matches); skipping")
        return PullResult(target, "skipped")
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = SharedFileLock(
        target.with_name(target.name + ".lock"), stale_after=settings.lock_stale_after_s, log=logger.info
    )
    while True:
        try:
            lock.acquire(timeout=settings.lock_timeout_s)
        except LockTimeout as err:
            raise PullError(str(err)) from err
        try:
            # Finished by another job while we waited: counts even with --force when it finished after we started.
            record = read_json(digest_record_path(target)) or {}
            finished_meanwhile = record.get("imported_at", 0) >= started and record_matches(settings, target)
            if finished_meanwhile or (not force and record_matches(settings, target, verify=verify)):
                logger.info(f"{target} was imported by another job while this one waited; skipping")
                return PullResult(target, "imported-by-other")
            for leftover in target.parent.glob(f".{target.stem}.tmp-*"):  # of holders that died (we hold the lock)
                leftover.unlink(missing_ok=True)
            scratch = target.with_name(f".{target.stem}.tmp-{uuid.uuid4().hex}{target.suffix}")
            command = import_command(settings.runtime, settings.image, scratch, executable)
            status = _run_import(command, lock)
            if status is None or not lock.still_held():
                scratch.unlink(missing_ok=True)
                logger.info("lost the lock during the import; waiting for it again")
                continue
            if status != 0 or not scratch.is_file():
                scratch.unlink(missing_ok=True)
                what = f"exited with status {status}" if status != 0 else "exited without writing the image"
                raise PullError(
                    f"`{shlex.join(command[:2])}` {what}; see its output above (registry credentials: "
                    "see `beam-slurm pull-container --help`)"
                )
            sha256 = "sha256:" + sha256_file(scratch)
            digest_record_path(target).unlink(missing_ok=True)  # never a record describing another file
            publish(scratch, target)
            _write_record(settings, target, sha256)
            logger.info(f"imported {settings.image} -> {target} ({target.stat().st_size} bytes, {sha256})")
            return PullResult(target, "imported")
        finally:
            lock.release()


def settings_problems(settings: ContainerSettings, executable: str | None) -> list[str]:
    if settings.runtime not in RUNTIME_EXECUTABLE:
        return [
            f"container.runtime={settings.runtime!r}: nothing to pull for this runtime; fix: set "
            "container.runtime=pyxis or container.runtime=apptainer (or BEAM_CONTAINER_RUNTIME)"
        ]
    messages = [str(problem) for problem in validate(settings)]
    if settings.image and is_local_image(settings.image):
        messages.append(
            f"container.image: {settings.image!r} is a local file; nothing to pull; fix: give a registry reference"
        )
    if not settings.image_cache_dir:
        messages.append(
            "container.image_cache_dir: not set; fix: give a directory on shared storage, "
            "or set BEAM_CONTAINER_CACHE_DIR"
        )
    if not messages and executable is None:
        name = RUNTIME_EXECUTABLE[settings.runtime]
        messages.append(
            f"container.runtime={settings.runtime}: `{name}` is not on PATH on {socket.gethostname()}; "
            f"fix: run where {name} is installed (e.g. `sbatch sbatch/pull_container.sh`) or load its module"
        )
    return messages
