"""Fixtures and builders of the evaluation tests (a plugin of tests/conftest.py): a tiny real model for vLLM's CPU build and a small AIME-format parquet."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from pathlib import Path

import pytest
from aime_files import TAUGHT_ANSWERS, TAUGHT_PROMPTS, write_aime_parquet
from tiny_model import build_lora_adapter, build_tiny_model

SHARED_BUILDS = Path("/var/tmp/beam-tests-cache")
"""Built test inputs shared by the two pytest processes of tools/run_tests.sh (and by later runs of the same
builder version). /var/tmp: the sandbox nodes share it with this machine, unlike /tmp."""


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A tiny Llama + tokenizer + chat template, taught its answers. Built once for this version of the builder and
    of the taught answers: the first process to need it builds it under a file lock, the other waits and reuses it."""
    here = Path(__file__).parent
    version = hashlib.sha256(b"".join((here / name).read_bytes() for name in ("tiny_model.py", "aime_files.py")))
    model = SHARED_BUILDS / f"tiny-model-{version.hexdigest()[:16]}"
    SHARED_BUILDS.mkdir(parents=True, exist_ok=True)
    # flock is right here: SHARED_BUILDS is this machine's /var/tmp (node-local), shared by its test processes only.
    with open(SHARED_BUILDS / f"{model.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not model.is_dir():
            partial = SHARED_BUILDS / f"{model.name}.partial-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            build_tiny_model(partial, taught_answers=TAUGHT_ANSWERS, taught_prompts=TAUGHT_PROMPTS)
            partial.rename(model)  # complete or absent, never half-written
    return model


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
