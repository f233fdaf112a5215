"""Inputs for pipeline tests: small DAPO/AIME source files, a model folder, and the environment a run reads."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "data"))  # the data tests' synthetic inputs in the real schemas

from dapo_inputs import aime2024_rows, random_rows, write_aime2025_yentinglin, write_dapo  # noqa: E402

FAKE_IMPORT = TESTS / "containers" / "test_doubles" / "fake_image_import"
IMAGE = "ghcr.io/example/skyrl:beam-release"


def make_sources(root: Path) -> list[str]:
    """Write small source files and return the data.* overrides that point the data stage at them."""
    root.mkdir(parents=True, exist_ok=True)
    dapo = write_dapo(root / "dapo.parquet", random_rows(0, 200))
    aime24 = write_dapo(root / "aime24.parquet", aime2024_rows())
    aime25 = write_aime2025_yentinglin(root / "aime25.parquet")
    return [f"data.dapo_math={dapo}", f"data.aime2024={aime24}", f"data.aime2025={aime25}"]


@pytest.fixture
def run_env(tmp_path, monkeypatch):
    """A HOME, model, data and SkyRL folder for one test; returns (root, data overrides)."""
    for name in ("MODEL_PATH", "DATA_DIR", "SKYRL_DIR", "CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR",
                 "MAX_TRAINING_STEPS", "CKPT_INTERVAL", "RESUME_MODE", "BEAM_CONTAINER_IMAGE", "BEAM_SLURM_HOME",
                 "BEAM_TRAINER_BACKEND", "XDG_STATE_HOME", "BEAM_EXPORTS_ROOT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "model").mkdir()
    (tmp_path / "skyrl").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MODEL_PATH", str(tmp_path / "model"))
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SKYRL_DIR", str(tmp_path / "skyrl"))
    return tmp_path, make_sources(tmp_path / "sources")


def fake_runtime_bin(directory: Path) -> Path:
    """A bin folder whose `enroot` is the container test double (no container runtime exists here)."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "enroot"
    if not link.exists():
        link.symlink_to(FAKE_IMPORT)
    return directory
