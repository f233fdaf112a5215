"""AIME 2025 conversion: the three published column layouts, canonical answers, clear errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dapo_inputs import (
    AIME2025_ANSWERS,
    write_aime2025_matharena,
    write_aime2025_opencompass,
    write_aime2025_yentinglin,
)

from beam_slurm.core.errors import BadDataInput
from beam_slurm.jobs.data.aime import canonical_answer, convert_aime_files
from beam_slurm.jobs.data.dapo_format import DAPO_SCHEMA, PROMPT_PREFIX, PROMPT_SUFFIX


@pytest.mark.parametrize("layout", ["yentinglin", "matharena", "opencompass"])
def test_layouts_convert_to_the_same_dapo_rows(tmp_path, layout):
    if layout == "yentinglin":
        files = [write_aime2025_yentinglin(tmp_path / "train.parquet")]
    elif layout == "matharena":
        files = [write_aime2025_matharena(tmp_path / "train.parquet")]
    else:
        files = write_aime2025_opencompass(tmp_path)
    table = convert_aime_files(files, "data.aime2025", "aime2025")
    assert table.schema.equals(DAPO_SCHEMA)
    rows = table.to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in rows] == [str(a) for a in AIME2025_ANSWERS]
    assert {r["reward_model"]["style"] for r in rows} == {"rule-lighteval/MATH_v2"}
    assert {r["data_source"] for r in rows} == {"aime2025"} and {r["ability"] for r in rows} == {"MATH"}
    assert rows[0]["prompt"] == [
        {"content": PROMPT_PREFIX + "AIME 2025 problem 1: find $n$." + PROMPT_SUFFIX, "role": "user"}
    ]
    assert [r["extra_info"]["index"] for r in rows] == [str(i) for i in range(30)]


@pytest.mark.parametrize(
    "value, expected", [("025", "25"), (" 7 ", "7"), (25, "25"), (70.0, "70"), ("000", "0"), ("+5", "5")]
)
def test_canonical_answers(value, expected):
    assert canonical_answer(value, "row") == expected


@pytest.mark.parametrize(
    "value, message",
    [("", "empty ground truth"), (None, "empty ground truth"), ("3/4", "not an integer"), (1000, "outside 0-999"),
     (2.5, "not an integer"), (True, "not an integer"), ("-1", "outside 0-999")],
)
def test_bad_answers_are_named(value, message):
    with pytest.raises(BadDataInput, match=message):
        canonical_answer(value, "data.aime2025 row 3")


def test_unknown_layout_lists_found_and_expected_columns(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"text": "p", "solution": "1"}) + "\n")
    with pytest.raises(BadDataInput, match=r"found columns text, solution; expected a problem column"):
        convert_aime_files([path], "data.aime2025", "aime2025")


def test_empty_problem_and_truncated_parquet_are_errors(tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"problem": ["ok", " "], "answer": [1, 2]}), path)
    with pytest.raises(BadDataInput, match=r"row 1: empty or non-text 'problem'"):
        convert_aime_files([path], "data.aime2025", "aime2025")
    good = write_aime2025_matharena(tmp_path / "good.parquet")
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(BadDataInput, match="truncated or corrupt"):
        convert_aime_files([truncated], "data.aime2025", "aime2025")
