"""What the Ray step leaves for the batch shell (`slurm.attempt`): exit statuses and the files in the attempt's log
folder; the contract between the nodes and the batch shell."""

from __future__ import annotations

import errno
import os
import socket
import time
from pathlib import Path
from typing import Any

from beam_slurm.core.atomic_files import read_json, write_json
from beam_slurm.core.layout import attempt_dir as attempt_dir_of

EXIT_INFRA = 75  # a node's Ray died, a node never joined or the head vanished: a requeue may help
EXIT_SETUP = 78  # bring-up found a configuration fault (GPU visibility, interface, task layout): it will not
EXIT_STOPPED = 143  # stopped (SIGTERM) before the driver finished
# The files, all in BEAM_ATTEMPT_DIR.
FAILURE_FILE = "failure.json"  # the first failure: {kind: infra|setup|storage, node, rank, reason, time}
READY_FILE = "ray_ready.json"  # the bring-up's times (epoch seconds, `Head.run`)
BRINGUP_DIR = "bringup"  # bringup/<host>.json: {host, rank, node_start, ray_start: [began, returned]}
HEAD_FILE = "ray_head.json"  # where the head is, once its GCS listens (`beam-slurm attach` reads it)
DRIVER_EXIT_FILE = "driver_exit.json"  # {status, time}
STOPPING_FILE = "ray_step_stopping"  # the batch shell stops the step: a SIGTERM then is never held as a notice
TERM_RELAYED_FILE = "sigterm_relayed.json"  # the head relayed a preemption's SIGTERM as USR1 (where a notice came from)


class NodeFailure(Exception):
    """A failure this node detected; `kind` is 'infra' (a requeue may help) or 'setup' (it will not)."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


def shell_status(status: int | None) -> int:
    """A Popen return code as a shell would report it (killed by signal N -> 128+N); None -> EXIT_INFRA."""
    return EXIT_INFRA if status is None else (128 - status if status < 0 else status)


def mark_stopping(attempt_dir: Path) -> None:
    """Say that this attempt's Ray step is being stopped by us (`STOPPING_FILE`): a SIGTERM then is never held."""
    (Path(attempt_dir) / STOPPING_FILE).write_text(f"{time.time():.3f}\n")


def stopping(attempt_dir: Path) -> bool:
    return (Path(attempt_dir) / STOPPING_FILE).exists()


def record_first_failure(attempt_dir: Path | None, kind: str, host: str, rank: int, reason: str) -> None:
    """Keep the attempt's first failure (later ones are consequences of it)."""
    if attempt_dir is None:
        return
    path = attempt_dir / FAILURE_FILE
    if not path.exists():
        write_json(path, {"kind": kind, "node": host, "rank": rank, "reason": reason, "time": time.time()})


_FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = ("[Errno 28]", "No space left on device", "[Errno 122]", "Disk quota exceeded")
_INFRA_ERRORS = (
    "RayActorError",
    "ActorDiedError",
    "ActorUnavailableError",
    "NodeDiedError",
    "RaySystemError",
    "ObjectLostError",
    "OwnerDiedError",
    "ObjectReconstructionFailedError",
    "WorkerCrashedError",
    "DistBackendError",
)
_INFRA_TEXT = (
    "NCCL error",
    "ncclSystemError",
    "ncclInternalError",
    "ncclRemoteError",
    "uncorrectable ECC",
    "Watchdog caught collective operation timeout",
    "The actor died unexpectedly",
)


def classify_driver_error(exc: BaseException) -> tuple[str, str] | None:
    """(kind, reason) of a driver's exception: 'storage' (the checkpoint storage is full: every attempt would fail the
    same save), 'infra' (a Ray worker, node or NCCL peer died: another Ray step may succeed); None for the rest."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:  # Ray wraps a task's error (RayTaskError(cause)); follow it
        chain.append(seen)
        seen = getattr(seen, "cause", None) or seen.__cause__ or seen.__context__
    for error in chain:
        if isinstance(error, OSError) and error.errno in _FULL:
            return "storage", f"{error.strerror} writing {error.filename or 'a checkpoint'}"
    text = "\n".join(f"{type(e).__name__}: {e}" for e in chain)
    if any(marker in text for marker in _FULL_TEXT):
        return "storage", next(line for line in text.splitlines() if any(m in line for m in _FULL_TEXT))[:300]
    if any(type(e).__name__ in _INFRA_ERRORS for e in chain) or any(marker in text for marker in _INFRA_TEXT):
        return "infra", f"driver: {text.splitlines()[0][:300]}"
    return None


def note_driver_error(exc: BaseException) -> None:
    """Record a classified driver error as the attempt's failure (the batch shell's requeue policy reads it)."""
    found = classify_driver_error(exc)
    if found is not None:
        # infra: no node to blame (a Ray actor's node is not the driver's); storage: the driver's node saw it.
        host = (os.environ.get("SLURMD_NODENAME") or socket.gethostname()) if found[0] == "storage" else ""
        record_first_failure(attempt_dir_of(), found[0], host, 0, found[1])


def record_driver_exit(attempt_dir: Path | None, status: int) -> None:
    if attempt_dir is not None:
        write_json(attempt_dir / DRIVER_EXIT_FILE, {"status": status, "time": time.time()})


def read_failure(attempt_dir: Path) -> dict[str, Any] | None:
    """The attempt's first failure ({kind, node, reason, ...}), None when no node recorded one."""
    failure: dict[str, Any] | None = read_json(attempt_dir / FAILURE_FILE)
    return failure


def read_driver_status(attempt_dir: Path) -> int | None:
    """The driver's exit status, None when the driver never ended (or never started)."""
    record = read_json(attempt_dir / DRIVER_EXIT_FILE)
    return int(record["status"]) if record else None
