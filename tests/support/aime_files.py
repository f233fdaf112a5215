"""The tiny AIME benchmark the evaluation tests use: prompts the tiny model was taught, their ground truths, and a
writer of the cleaned DAPO/AIME parquet format. Plain module (not conftest) so test files can import it by name."""

from __future__ import annotations

from pathlib import Path

# The tiny model is taught to answer 42 under reasoning effort "minimal" and 7 under "high" for these prompts,
# so grading of its real generations has known right and wrong answers.
TAUGHT_PROMPTS = [
    "Problem A: find x.",
    "Problem B: compute y.",
    "Problem C: count z.",
]
TAUGHT_ANSWERS = {"minimal": "42", "high": "7"}
# Ground truths of the tiny benchmark: under "minimal", problems 0 and 1 are right and problem 2 is wrong;
# under "high" the other way round.
GROUND_TRUTHS = ["42", "42", "7"]



def write_aime_parquet(path: Path, data_source: str = "aime_tiny", ground_truths=None, prompts=None) -> Path:
    """Write a parquet in the cleaned DAPO/AIME format."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ground_truths = GROUND_TRUTHS if ground_truths is None else ground_truths
    prompts = TAUGHT_PROMPTS if prompts is None else prompts
    rows = [
        {
            "data_source": data_source,
            "prompt": [{"role": "user", "content": prompt}],
            "ability": "MATH",
            "reward_model": {"ground_truth": truth, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": f"p{number}"},
        }
        for number, (prompt, truth) in enumerate(zip(prompts, ground_truths))
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path
