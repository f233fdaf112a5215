"""Read evaluation problems from the cleaned AIME parquet files (DAPO format).

Any problem with a file is reported with its name and the column, before a model is loaded."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beam_slurm.core.errors import UserError

# pyarrow is imported inside the functions that use it: status and report import this module and never read parquet.

REQUIRED_COLUMNS = ("prompt", "reward_model", "data_source")


class DatasetError(UserError, ValueError):
    """An evaluation parquet that cannot be used; the message names the file and the column."""


@dataclass(frozen=True)
class Problem:
    """One evaluation problem, as read from the cleaned parquet."""

    data_source: str  # metrics are grouped by it
    problem_id: str  # extra_info.index, else the row number
    messages: list[dict[str, str]]
    ground_truth: str


def _messages(value: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise DatasetError(f"{where}: prompt must be a non-empty list of {{role, content}} messages")
    if not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    ):
        raise DatasetError(f"{where}: every prompt message needs string 'role' and 'content'")
    return [{"role": message["role"], "content": message["content"]} for message in value]


def read_problems(path: str | Path, limit: int | None = None) -> list[Problem]:
    """Problems of one parquet file, in file order (the first `limit` only, when given)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"--data: {path} does not exist; run `beam-slurm prepare-data` or fix the path")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a non-parquet file
        raise DatasetError(f"--data: {path} is not a readable parquet file ({exc})") from exc
    missing = [column for column in REQUIRED_COLUMNS if column not in table.column_names]
    if missing:
        raise DatasetError(
            f"--data: {path} lacks column(s) {', '.join(missing)}; expected the cleaned DAPO/AIME "
            "format (prompt, reward_model.ground_truth, data_source)"
        )
    problems: list[Problem] = []
    seen: set[str] = set()
    for number, row in enumerate(table.to_pylist()[:limit]):
        where = f"--data: {path.name} row {number}"
        ground_truth = (row.get("reward_model") or {}).get("ground_truth")
        if ground_truth is None or str(ground_truth).strip() == "":
            raise DatasetError(f"{where}: reward_model.ground_truth is empty")
        data_source = row.get("data_source")
        if not isinstance(data_source, str) or not data_source:
            raise DatasetError(f"{where}: data_source is empty")
        index = (row.get("extra_info") or {}).get("index")
        problem_id = str(index) if index is not None else str(number)
        if problem_id in seen:
            raise DatasetError(f"{where}: problem id {problem_id!r} repeats; use the cleaned (deduplicated) file")
        seen.add(problem_id)
        problems.append(Problem(data_source, problem_id, _messages(row.get("prompt"), where), str(ground_truth)))
    if not problems:
        raise DatasetError(f"--data: {path} has no rows")
    return problems


_AIME_FILE = re.compile(r"aime[-_ ]?(\d{4})", re.IGNORECASE)


def dataset_label(data_file: str | Path | None, data_source: str) -> str:
    """What a benchmark is called in tables: by its file (`aime-2024-cleaned.parquet` -> aime2024), since AIME 2024
    keeps its source's data_source `math_dapo` (SkyRL's metric keys use it); else the data_source."""
    match = _AIME_FILE.search(Path(data_file).name) if data_file else None
    return f"aime{match.group(1)}" if match else data_source


def file_data_source(data_file: str | Path) -> str | None:
    """The data_source of a prepared parquet's first row, or None when the file cannot be read (moved, not here)."""
    try:
        import pyarrow.parquet as pq

        column = pq.read_table(data_file, columns=["data_source"]).column("data_source")
        return str(column[0].as_py()) if len(column) else None
    except Exception:  # a missing or foreign file only means no label: the data_source is shown instead
        return None


def labels_by_source(data_files) -> dict[str, str]:
    """{data_source: label} for the evaluation files that can be read, e.g. {"math_dapo": "aime2024"}."""
    labels: dict[str, str] = {}
    for data_file in data_files:
        source = file_data_source(data_file) if data_file else None
        if source is not None:
            labels.setdefault(source, dataset_label(data_file, source))
    return labels
