"""Save-on-notice: a file protocol between the Slurm job (which receives the notice) and the trainer (the only process
that can write a consistent checkpoint), in ``<ckpt_path>/.beam/``: the job writes ``save_request`` when a notice
arrives; the trainer writes ``saved_on_notice`` once the checkpoint it saved for it is complete (SkyRL's
``latest_ckpt_global_step.txt`` names that step). Every write is atomic; standard library only (Python 3.11 and 3.12).

Order of events: the job calls :func:`request_save`; the trainer sees :func:`pending_request` at the end of a step,
saves, calls :func:`acknowledge` and stops; the job waits for :func:`saved_since`, stops Ray and requeues; the next
attempt resumes from the marker and calls :func:`clear`. An acknowledged request is no longer pending, so a stale one
left by a crash cannot make a new attempt stop at once.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from beam_slurm.core.atomic_files import write_json

PROTOCOL_DIR = ".beam"  # hidden, so it never looks like a step
REQUEST_FILE = "save_request"
ACK_FILE = "saved_on_notice"
MARKER_FILE = "latest_ckpt_global_step.txt"  # SkyRL's, written last by its save routine


def _protocol_dir(ckpt_path: str | os.PathLike[str]) -> Path:
    return Path(ckpt_path) / PROTOCOL_DIR


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        # Written by hand or by something else: still a signal, timed by the file itself.
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return None
        return {"time": mtime, "reason": f"unreadable {path.name}: {text[:80]!r}"}
    return payload


def read_marker(ckpt_path: str | os.PathLike[str]) -> int | None:
    """The step named by SkyRL's ``latest_ckpt_global_step.txt`` under ``ckpt_path``, or None when absent."""
    try:
        text = (Path(ckpt_path) / MARKER_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise ValueError(
            f"{Path(ckpt_path) / MARKER_FILE} holds {text!r}, not a step number; remove or repair it before resuming"
        ) from exc


def request_save(ckpt_path: str | os.PathLike[str], reason: str) -> None:
    """Ask the trainer to save a checkpoint at the next step boundary and stop (the job, on a notice)."""
    payload = {"time": time.time(), "reason": str(reason), "host": socket.gethostname(), "pid": os.getpid()}
    write_json(_protocol_dir(ckpt_path) / REQUEST_FILE, payload)


def _answers(ack: dict[str, Any] | None, request_time: float) -> bool:
    if not ack or "global_step" not in ack:
        return False
    # The echoed request time is exact; the save time covers a second request that arrived during the save.
    return float(ack.get("request_time", -1.0)) >= request_time or float(ack.get("time", -1.0)) >= request_time


def pending_request(ckpt_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The save request not yet answered by a checkpoint (``{"time", "reason", ...}``), or None."""
    request = _read_json(_protocol_dir(ckpt_path) / REQUEST_FILE)
    if request is None:
        return None
    request["time"] = float(request.get("time", 0.0))
    return None if _answers(_read_json(_protocol_dir(ckpt_path) / ACK_FILE), request["time"]) else request


def acknowledge(ckpt_path: str | os.PathLike[str], global_step: int) -> None:
    """Record that ``global_step`` was saved for the pending request; ValueError unless SkyRL's marker names it."""
    marker = read_marker(ckpt_path)
    if marker != int(global_step):
        raise ValueError(
            f"cannot acknowledge a save of step {global_step}: {Path(ckpt_path) / MARKER_FILE} names "
            f"{marker if marker is not None else 'nothing'}; acknowledge only after the checkpoint is "
            "complete"
        )
    request = _read_json(_protocol_dir(ckpt_path) / REQUEST_FILE) or {}
    payload = {
        "global_step": int(global_step),
        "time": time.time(),
        "request_time": float(request.get("time", -1.0)),
        "reason": request.get("reason", ""),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    write_json(_protocol_dir(ckpt_path) / ACK_FILE, payload)


def saved_since(ckpt_path: str | os.PathLike[str], request_time: float) -> int | None:
    """The step saved in answer to a request made at ``request_time`` (epoch seconds), or None if not yet."""
    ack = _read_json(_protocol_dir(ckpt_path) / ACK_FILE)
    return int(ack["global_step"]) if ack and _answers(ack, float(request_time)) else None


def clear(ckpt_path: str | os.PathLike[str]) -> None:
    """Remove the request and the acknowledgement (start of a new attempt). Checkpoints are never touched."""
    for name in (REQUEST_FILE, ACK_FILE):
        (_protocol_dir(ckpt_path) / name).unlink(missing_ok=True)
