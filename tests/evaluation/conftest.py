"""Fixtures for the evaluation tests: a tiny real model for vLLM's CPU build and a small AIME-format parquet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tiny_model import build_lora_adapter, build_tiny_model

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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny Llama + tokenizer + chat template, built once per test session."""
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny-model") / "model", taught_answers=TAUGHT_ANSWERS, taught_prompts=TAUGHT_PROMPTS
    )


@pytest.fixture(scope="session")
def tiny_lora_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A random LoRA adapter for the tiny model (PEFT layout)."""
    return build_lora_adapter(tmp_path_factory.mktemp("tiny-lora") / "adapter", tiny_model_dir)


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


@pytest.fixture
def aime_parquet(tmp_path) -> Path:
    return write_aime_parquet(tmp_path / "aime-tiny-cleaned.parquet")


@pytest.fixture
def export_step(tiny_model_dir, tmp_path) -> Path:
    """A SkyRL-style HF export of step 5: <export_path>/global_step_5/policy/ holding the tiny model."""
    policy = tmp_path / "exports" / "run1" / "global_step_5" / "policy"
    shutil.copytree(tiny_model_dir, policy)
    return policy.parent
