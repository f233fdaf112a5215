"""AIME problem sets with plain problem/answer columns (`problem` or `question`, `answer`), converted into the DAPO row
format; answers become canonical integer strings ("025" -> "25") because the DAPO reward compares strings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa

from beam_slurm.core.errors import BadDataInput
from beam_slurm.jobs.data.cleaning import open_parquet
from beam_slurm.jobs.data.dapo_format import ABILITY, DAPO_SCHEMA, REWARD_STYLE, canonical_integer, dapo_prompt

PROBLEM_COLUMNS = ("problem", "question", "Problem", "Question")
ANSWER_COLUMNS = ("answer", "Answer")
AIME_ANSWER_RANGE = range(0, 1000)


def _records(path: Path, where: str) -> list[dict]:
    if path.suffix == ".parquet":
        try:
            return open_parquet(path, where).read().to_pylist()
        except pa.ArrowException as error:
            raise BadDataInput(f"{where}: not a readable parquet file (truncated or corrupt?): {error}") from None
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            records: list[dict] | None = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            loaded = json.loads(text)
            records = loaded if isinstance(loaded, list) else None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadDataInput(f"{where}: not valid {path.suffix[1:]} ({error})") from None
    if records is None or not all(isinstance(r, dict) for r in records):
        raise BadDataInput(f"{where}: expected one JSON object per problem (a .jsonl file or a JSON list)")
    return records


def _pick(columns: list[str], candidates: tuple[str, ...]) -> str | None:
    return next((name for name in candidates if name in columns), None)


def canonical_answer(value: object, where: str) -> str:
    """The AIME answer as a canonical integer string; raises BadDataInput for anything else."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadDataInput(f"{where}: empty ground truth (answer)")
    if isinstance(value, bool):
        raise BadDataInput(f"{where}: answer {value!r} is not an integer")
    if not (
        isinstance(value, int)
        or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
        or (isinstance(value, str) and canonical_integer(value) is not None)
    ):
        raise BadDataInput(f"{where}: answer {value!r} is not an integer (AIME answers are integers 0-999)")
    number = int(value)
    if number not in AIME_ANSWER_RANGE:
        raise BadDataInput(f"{where}: answer {number} is outside 0-999, not an AIME answer")
    return str(number)


def convert_aime_files(files: list[Path], where: str, data_source: str) -> pa.Table:
    """Read problem/answer files (parquet, jsonl, json) in order and return the rows in the DAPO format."""
    rows: list[dict] = []
    for path in files:
        records = _records(path, f"{where} ({path})")
        if not records:
            raise BadDataInput(f"{where} ({path}): no problems in the file")
        columns = list(records[0].keys())
        problem_column, answer_column = _pick(columns, PROBLEM_COLUMNS), _pick(columns, ANSWER_COLUMNS)
        if problem_column is None or answer_column is None:
            raise BadDataInput(
                f"{where} ({path}): found columns {', '.join(columns)}; expected a problem column "
                f"({' or '.join(PROBLEM_COLUMNS)}) and an answer column ({' or '.join(ANSWER_COLUMNS)})"
            )
        for row_number, record in enumerate(records):
            at = f"{where} ({path}) row {row_number}"
            problem = record.get(problem_column)
            if not isinstance(problem, str) or not problem.strip():
                raise BadDataInput(f"{at}: empty or non-text {problem_column!r}")
            rows.append(
                {
                    "data_source": data_source,
                    "prompt": dapo_prompt(problem.strip()),
                    "ability": ABILITY,
                    "reward_model": {
                        "ground_truth": canonical_answer(record.get(answer_column), at),
                        "style": REWARD_STYLE,
                    },
                    "extra_info": {"index": str(len(rows))},
                }
            )
    return pa.Table.from_pylist(rows, schema=DAPO_SCHEMA)
