"""Fixtures for the evaluation tests: a tiny real model for vLLM's CPU build and a small AIME-format parquet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aime_files import TAUGHT_ANSWERS, TAUGHT_PROMPTS, write_aime_parquet
from tiny_model import build_lora_adapter, build_tiny_model

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


@pytest.fixture
def aime_parquet(tmp_path) -> Path:
    return write_aime_parquet(tmp_path / "aime-tiny-cleaned.parquet")


@pytest.fixture
def export_step(tiny_model_dir, tmp_path) -> Path:
    """A SkyRL-style HF export of step 5: <export_path>/global_step_5/policy/ holding the tiny model."""
    policy = tmp_path / "exports" / "run1" / "global_step_5" / "policy"
    shutil.copytree(tiny_model_dir, policy)
    return policy.parent
