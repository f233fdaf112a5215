"""Training metrics as the run report reads them: ``<export_path>/train_metrics.jsonl``, one JSON object per line.

Each line is one logged step with SkyRL's metric names (what :mod:`beam_slurm.verbs.report` plots). Lines are
only appended: a redone step is appended again, the report keeps the later line.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TRAIN_METRICS_FILE = "train_metrics.jsonl"  # the report looks for exactly this name


def _plain(value: Any) -> Any:
    # numpy scalars and 0-d tensors (both have .item()) become plain numbers; anything else its text
    item = getattr(value, "item", None)
    if callable(item):
        with contextlib.suppress(TypeError, ValueError, RuntimeError):
            return item()
    return str(value)


def append_step_metrics(export_path: str | os.PathLike[str], step: int, metrics: Mapping[str, Any]) -> Path:
    """Append ``{"step": step, **metrics}`` as one line, in one ``O_APPEND`` ``write`` (no half lines); the file."""
    record = {"step": int(step), **{k: v for k, v in metrics.items() if k != "step"}}
    data = (json.dumps(record, default=_plain) + "\n").encode()
    path = Path(export_path) / TRAIN_METRICS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
    finally:
        os.close(fd)
    if written != len(data):
        raise OSError(f"short write to {path}: {written} of {len(data)} bytes (disk full?)")
    return path
