"""On-disk layout of an evaluation's results, shared by `beam-slurm grade`, the evaluate stage and the report.

One evaluation lives in ``<export_path>/beam_evals/global_step_<N>/``: grades.jsonl (and .parquet), details.json,
info.json (the caller's ``extra``) and metrics.json, written last to mark it finished. A rehearsal export's evaluation
(``rehearsal.json`` in its model folder) has ``"rehearsal": true`` in info.json and each metrics entry: never a step's
result."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from beam_slurm.core.atomic_files import atomic_writer, write_text
from beam_slurm.core.json_text import json_text
from beam_slurm.core.layout import EVALS_DIRNAME, POLICY_SUBDIR, evaluation_dir  # noqa: F401 (re-exported)
from beam_slurm.jobs.evaluation.metrics import compute_details

# pyarrow is imported inside the functions that use it: status and report import this module and never write parquet.

METRICS_FILE = "metrics.json"
GRADES_FILE = "grades.jsonl"
GRADES_PARQUET = "grades.parquet"
DETAILS_FILE = "details.json"
INFO_FILE = "info.json"
REHEARSAL_MARKER = "rehearsal.json"  # written by the rehearsal trainer into each HF export


def write_json(path: Path, payload: Any) -> None:
    """Write JSON atomically (temp file + rename), keys in the order given."""
    write_text(path, json_text(payload, ensure_ascii=False))


def _grades_table(grades: list[dict[str, Any]]):
    import pyarrow as pa

    known = {
        "data_source": (pa.string(), str),
        "problem_id": (pa.string(), str),
        "sample": (pa.int64(), int),
        "response": (pa.large_string(), str),
        "ground_truth": (pa.string(), str),
        "correct": (pa.bool_(), bool),
        "pred": (pa.string(), None),
        "math_verify": (pa.bool_(), None),
    }  # None: taken as it is
    columns: dict[str, Any] = {
        name: pa.array(
            [g.get(name) if convert is None or g.get(name) is None else convert(g[name]) for g in grades],
            type=arrow_type,
        )
        for name, (arrow_type, convert) in known.items()
    }
    for name in sorted({key for g in grades for key in g} - set(known)):
        values = [g.get(name) for g in grades]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # Mixed types in a pass-through field: keep it readable rather than drop it.
            columns[name] = pa.array([None if v is None else json.dumps(v) for v in values], type=pa.string())
    return pa.table(columns)


def rehearsal_export(extra: dict[str, Any] | None) -> str | None:
    """The rehearsal marker of the model an evaluation loaded (from what it records), or None for a real checkpoint."""
    if not extra:
        return None
    candidates = [extra.get("checkpoint")]
    for holder in (extra.get("fingerprint"), (extra.get("task_key") or {}).get("sampling")):
        model = holder.get("model") if isinstance(holder, dict) else None
        if isinstance(model, dict):
            candidates += [model.get("model_path"), model.get("lora_path")]
    markers = (
        Path(candidate) / folder / REHEARSAL_MARKER
        for candidate in candidates
        if isinstance(candidate, str) and candidate
        for folder in ("", POLICY_SUBDIR)
    )
    return next((str(marker) for marker in markers if marker.is_file()), None)


def write_results(
    out_dir: str | os.PathLike,
    grades: list[dict[str, Any]],
    metrics: Mapping[str, Mapping[str, Any]],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write one evaluation's files into ``out_dir`` (atomically, ``metrics.json`` last) and return the folder."""
    import pyarrow.parquet as pq

    out = Path(out_dir)  # made by the first write
    marker = rehearsal_export(extra)
    if marker is not None:  # made-up weights: every file a reader might take as the step's result says so
        assert extra is not None  # the marker was found in it
        extra = {**extra, "rehearsal": True, "rehearsal_marker": marker}
        metrics = {
            source: {**entry, "rehearsal": True} if isinstance(entry, dict) else entry
            for source, entry in metrics.items()
        }

    with atomic_writer(out / GRADES_FILE) as handle:
        for grade in grades:
            handle.write(json.dumps(grade, ensure_ascii=False) + "\n")
    with atomic_writer(out / GRADES_PARQUET, "wb") as handle:
        pq.write_table(_grades_table(grades), handle)
    write_json(out / DETAILS_FILE, compute_details(grades))
    if extra is not None:
        write_json(out / INFO_FILE, extra)
    write_json(out / METRICS_FILE, metrics)
    return out


def finished_metrics(out_dir: str | os.PathLike) -> dict[str, dict[str, Any]] | None:
    """The metrics of a finished evaluation in ``out_dir``, or None if it has not finished."""
    path = Path(out_dir) / METRICS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
