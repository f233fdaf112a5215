"""Synthetic inputs in the real schemas, and the reference rule written with polars (as SkyRL's script does)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from beam_slurm.jobs.data.dapo_format import DAPO_SCHEMA, PROMPT_PREFIX, PROMPT_SUFFIX

KEY = ["data_source", "prompt", "ability", "reward_model"]
STYLE = "rule-lighteval/MATH_v2"
# AIME answers by problem index (I then II), public.
AIME2025_ANSWERS = [70, 588, 16, 117, 279, 504, 821, 77, 62, 81, 259, 510, 204, 60, 735,
                    468, 49, 82, 106, 336, 293, 237, 610, 149, 907, 113, 19, 248, 104, 240]
AIME2024_ANSWERS = [45, 116, 540, 468, 385, 23, 371, 33, 104, 809, 73, 601, 80, 315, 721,
                    127, 197, 294, 902, 211, 110, 113, 55, 104, 25, 204, 236, 480, 321, 699]


def row(problem: str, answer: str, index: str, data_source: str = "math_dapo", messages=None, style=STYLE) -> dict:
    """One DAPO-format row."""
    prompt = messages if messages is not None else [{"content": PROMPT_PREFIX + problem + PROMPT_SUFFIX, "role": "user"}]
    return {
        "data_source": data_source,
        "prompt": prompt,
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": style},
        "extra_info": {"index": index},
    }


def tricky_rows() -> list[dict]:
    """Duplicates differing only in extra_info, conflicts, unicode, multi-message prompts, near-identical keys."""
    rows = [
        row("Find x if x² = 4 🙂", "2", "a"),
        row("Find x if x² = 4 🙂", "2", "b"),  # duplicate, other extra_info: the first one is kept
        row("求 1+1", "2", "c"),
        row("Conflicting problem", "5", "d"),
        row("Conflicting problem", "6", "e"),  # second ground truth: the prompt is dropped entirely
        row("Conflicting problem", "5", "f"),
        row("e\u0301 vs é", "1", "g"),  # combining accent: a different string from the precomposed one
        row("é vs é", "1", "h"),
        row("", "0", "i", messages=[{"content": "a", "role": "bc"}]),
        row("", "0", "j", messages=[{"content": "ab", "role": "c"}]),  # same concatenation, different fields
        row("", "3", "k", messages=[{"content": "sys", "role": "system"}, {"content": "q", "role": "user"}]),
        row("", "3", "l", messages=[{"content": "sys", "role": "system"}, {"content": "q", "role": "user"}]),
        row("Same prompt, other source", "7", "m", data_source="other"),
        row("Same prompt, other source", "7", "n"),  # one reward_model across sources: both kept
        row("Source conflict", "1", "o", data_source="other"),
        row("Source conflict", "2", "p"),  # conflict across data_source: both dropped
        row("Style differs", "4", "q", style="x"),
        row("Style differs", "4", "r"),  # reward_model differs in style only: a conflict too
        row("Null style", "8", "s", style=None),
        row("Null style", "8", "t", style=None),
        row("Null extra", "9", None),
        row("Find x if x² = 4 🙂", "2", "u"),
    ]
    rows.append({**row("Null extra struct", "1", "v"), "extra_info": None})
    return rows


def random_rows(seed: int, count: int) -> list[dict]:
    """Rows drawn from small pools so duplicates and conflicts are frequent."""
    rng = random.Random(seed)
    problems = [f"problem {i} {'ü' * (i % 3)}" for i in range(25)]
    rows = []
    for i in range(count):
        problem = rng.choice(problems)
        answer = str(rng.choice([1, 1, 1, 2]) if problem.endswith("ü") else hash(problem) % 97)
        rows.append(row(problem, answer, str(i), data_source=rng.choice(["math_dapo", "math_dapo", "x"])))
    return rows


def write_dapo(path: Path, rows: list[dict], row_group_size: int | None = None) -> Path:
    """Write rows with the published DAPO schema."""
    pq.write_table(pa.Table.from_pylist(rows, schema=DAPO_SCHEMA), path, row_group_size=row_group_size)
    return path


def reference_clean(frame: pl.DataFrame) -> pl.DataFrame:
    """SkyRL's rule with a deterministic choice among duplicates: the first occurrence, in input order."""
    frame = frame.unique(subset=KEY, keep="first", maintain_order=True)
    return frame.filter(pl.col("reward_model").n_unique().over("prompt") == 1)


def aime2024_rows(zero_pad: bool = False) -> list[dict]:
    """AIME 2024 as the DAPO repository ships it: 30 problems x 32 copies with distinct extra_info."""
    rows = []
    for copy in range(32):
        for number, answer in enumerate(AIME2024_ANSWERS):
            text = f"{answer:03d}" if zero_pad and copy % 2 else str(answer)
            rows.append(row(f"AIME 2024 problem {number + 1}", text, f"{copy}-{number}"))
    return rows


def write_aime2025_yentinglin(path: Path) -> Path:
    """problem/answer (string, some zero-padded) in parquet, as yentinglin/aime_2025."""
    table = pa.table(
        {
            "id": list(range(30)),
            "problem": [f"AIME 2025 problem {i + 1}: find $n$." for i in range(30)],
            "answer": [f"{a:03d}" if a < 100 else str(a) for a in AIME2025_ANSWERS],
            "year": ["2025"] * 30,
        }
    )
    pq.write_table(table, path)
    return path


def write_aime2025_matharena(path: Path) -> Path:
    """problem_idx/problem/answer (int) in parquet, as MathArena/aime_2025."""
    table = pa.table(
        {
            "problem_idx": list(range(1, 31)),
            "problem": [f"AIME 2025 problem {i + 1}: find $n$." for i in range(30)],
            "answer": pa.array(AIME2025_ANSWERS, pa.int64()),
        }
    )
    pq.write_table(table, path)
    return path


def write_aime2025_opencompass(directory: Path) -> list[Path]:
    """question/answer jsonl, one file per contest, as opencompass/AIME2025."""
    paths = []
    for part, answers in (("I", AIME2025_ANSWERS[:15]), ("II", AIME2025_ANSWERS[15:])):
        path = directory / f"aime2025-{part}.jsonl"
        offset = 0 if part == "I" else 15
        path.write_text(
            "".join(
                json.dumps({"question": f"AIME 2025 problem {offset + i + 1}: find $n$.", "answer": str(a)}) + "\n"
                for i, a in enumerate(answers)
            )
        )
        paths.append(path)
    return paths
