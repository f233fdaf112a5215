"""Benchmark: our streamed prepare-data stage against SkyRL's pandas-load + polars-unique script, in one run.

Generates a DAPO-shaped parquet (default 1,791,700 rows over 17,398 distinct prompts, ~103x duplication in random
order, extra_info unique per row, ~1% of prompts with two conflicting ground truths) plus a 960-row AIME 2024 file
and a 30-row AIME 2025 file, then runs in separate child processes:

  ours      beam-slurm prepare-data (all three outputs)
  baseline  SkyRL's data_preprocess_dapo_aime.py logic on the two DAPO-format files: pandas.read_parquet,
            polars.from_pandas(...).unique(subset=key), n_unique of reward_model over prompt, filter, to_parquet

Peak memory is each child's ru_maxrss (os.wait4). Prints a table with the ratios and checks that both outputs hold
the same rows (compared on the key columns, since the baseline keeps an arbitrary duplicate's extra_info).

    .venv/bin/python tools/bench_prepare_data.py [--rows N] [--prompts P] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beam_slurm.jobs.data.dapo_format import DAPO_SCHEMA, PROMPT_PREFIX, PROMPT_SUFFIX  # noqa: E402

KEY = ["data_source", "prompt", "ability", "reward_model"]
WORDS = "let x y be real numbers such that the sum of squares equals integer find value triangle circle área √2 π".split()

BASELINE = textwrap.dedent(
    """
    import sys
    import pandas as pd
    import polars as pl
    for source, target in zip(sys.argv[1::2], sys.argv[2::2]):
        frame = pl.from_pandas(pd.read_parquet(source)).unique(subset=["data_source", "prompt", "ability", "reward_model"])
        frame = frame.with_columns(pl.col("reward_model").n_unique().over("prompt").alias("n_rm"))
        frame.filter(pl.col("n_rm") == 1).drop("n_rm").to_pandas().to_parquet(target)
    """
)


def _problems(rng: np.random.Generator, count: int) -> list[str]:
    lengths = rng.integers(20, 120, size=count)
    words = np.array(WORDS)
    return [f"#{i} " + " ".join(words[rng.integers(0, len(words), size=n)]) for i, n in enumerate(lengths)]


def make_dapo(path: Path, rows: int, prompts: int, seed: int = 0) -> None:
    """A DAPO-Math-17K-shaped file: `prompts` distinct problems repeated to `rows` rows in random order."""
    rng = np.random.default_rng(seed)
    problems = _problems(rng, prompts)
    prompt = pa.array([[{"content": PROMPT_PREFIX + p + PROMPT_SUFFIX, "role": "user"}] for p in problems], DAPO_SCHEMA.field("prompt").type)
    answers = [str(x) for x in rng.integers(0, 10_000, size=prompts)]
    conflicting = rng.random(prompts) < 0.01
    reward = pa.array(
        [{"ground_truth": a, "style": "rule-lighteval/MATH_v2"} for a in answers]
        + [{"ground_truth": a + "0", "style": "rule-lighteval/MATH_v2"} for a in answers],
        DAPO_SCHEMA.field("reward_model").type,
    )
    order = np.resize(np.arange(prompts), rows)
    rng.shuffle(order)
    variant = conflicting[order] & (rng.random(rows) < 0.5)
    ids = rng.integers(0, 2**62, size=(rows, 2))
    index = pc.binary_join_element_wise(
        pa.array(np.char.mod("%016x", ids[:, 0])), pa.array(np.char.mod("%016x", ids[:, 1])), "-"
    )
    if isinstance(index, pa.ChunkedArray):
        index = index.combine_chunks()
    table = pa.table(
        {
            "data_source": pa.array(["math_dapo"] * rows),
            "prompt": prompt.take(pa.array(order)),
            "ability": pa.array(["MATH"] * rows),
            "reward_model": reward.take(pa.array(order + prompts * variant)),
            "extra_info": pa.StructArray.from_arrays([index], names=["index"]),
        }
    )
    pq.write_table(table, path)


def make_aime(directory: Path) -> tuple[Path, Path]:
    """AIME 2024 in the DAPO format (30 x 32 copies) and AIME 2025 as problem/answer jsonl (zero-padded answers)."""
    rows = []
    for copy in range(32):
        for problem in range(30):
            rows.append(
                {
                    "data_source": "math_dapo",
                    "prompt": [{"content": PROMPT_PREFIX + f"AIME 2024 problem {problem}" + PROMPT_SUFFIX, "role": "user"}],
                    "ability": "MATH",
                    "reward_model": {"ground_truth": str(100 + problem), "style": "rule-lighteval/MATH_v2"},
                    "extra_info": {"index": f"{copy}-{problem}"},
                }
            )
    aime2024 = directory / "aime-2024.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=DAPO_SCHEMA), aime2024)
    aime2025 = directory / "aime2025.jsonl"
    aime2025.write_text("".join(json.dumps({"problem": f"AIME 2025 problem {i}", "answer": f"{i:03d}"}) + "\n" for i in range(30)))
    return aime2024, aime2025


def run_child(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{command[:3]} failed ({process.returncode}):\n{stderr}")
    return wall, usage.ru_maxrss * 1024  # Linux reports KiB


def key_rows(path: Path) -> list[str]:
    table = pq.read_table(path, columns=KEY)
    return sorted(json.dumps(row, sort_keys=True, ensure_ascii=False) for row in table.to_pylist())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_791_700)
    parser.add_argument("--prompts", type=int, default=17_398)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory, removed after")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--generate-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate_into:
        make_dapo(args.generate_into, args.rows, args.prompts)
        return 0

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-prepare-data-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        dapo = workdir / "dapo-math-17k.parquet"
        started = time.monotonic()
        if not dapo.exists() or pq.ParquetFile(dapo).metadata.num_rows != args.rows:
            # In a child process: Linux counts a parent's resident pages into a forked child's ru_maxrss, so the
            # generator's memory must not live in the process that starts the measured runs.
            subprocess.run(
                [sys.executable, __file__, f"--rows={args.rows}", f"--prompts={args.prompts}", f"--generate-into={dapo}"],
                check=True,
            )
        aime2024, aime2025 = make_aime(workdir)
        in_memory = pq.ParquetFile(dapo).metadata
        print(
            f"input: {in_memory.num_rows} rows, {in_memory.num_row_groups} row group(s), "
            f"{dapo.stat().st_size / 2**20:.0f} MiB on disk (generated in {time.monotonic() - started:.0f} s)"
        )

        ours_dir, base_dir = workdir / "ours", workdir / "baseline"
        shutil.rmtree(ours_dir, ignore_errors=True)
        base_dir.mkdir(exist_ok=True)
        ours_cmd = [
            sys.executable, "-m", "beam_slurm.cli", "prepare-data", f"data.dapo_math={dapo}",
            f"data.aime2024={aime2024}", f"data.aime2025={aime2025}", f"data.out_dir={ours_dir}",
        ]
        base_cmd = [
            sys.executable, "-c", BASELINE, str(dapo), str(base_dir / "dapo-math-17k-cleaned.parquet"),
            str(aime2024), str(base_dir / "aime-2024-cleaned.parquet"),
        ]
        ours_wall, ours_rss = run_child(ours_cmd)
        base_wall, base_rss = run_child(base_cmd)

        same = {}
        for name in ("dapo-math-17k-cleaned.parquet", "aime-2024-cleaned.parquet"):
            ours_rows, base_rows = key_rows(ours_dir / name), key_rows(base_dir / name)
            same[name] = (ours_rows == base_rows, len(ours_rows), len(base_rows))

        mib = 2**20
        print()
        print(f"{'pipeline':<44} {'wall s':>8} {'peak RSS MiB':>13}")
        print(f"{'ours: beam-slurm prepare-data (streamed)':<44} {ours_wall:>8.1f} {ours_rss / mib:>13.0f}")
        print(f"{'baseline: pandas load + polars unique':<44} {base_wall:>8.1f} {base_rss / mib:>13.0f}")
        print(
            f"{'ratio':<44} {base_wall / ours_wall:>7.1f}x {ours_rss / base_rss:>12.2f}x"
            "   (speed-up; our memory as a fraction of the baseline's)"
        )
        print()
        for name, (equal, ours_count, base_count) in same.items():
            print(f"{name}: ours {ours_count} rows, baseline {base_count} rows, same row set: {'yes' if equal else 'NO'}")
        return 0 if all(equal for equal, _, _ in same.values()) else 1
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
