"""Fixtures of the run tests (a plugin of tests/conftest.py): small DAPO/AIME source files, a model folder, and the environment a run reads."""

from __future__ import annotations

import pytest
from pipeline_inputs import make_sources


@pytest.fixture
def run_env(tmp_path, monkeypatch):
    """A HOME, model, data and SkyRL folder for one test; returns (root, data overrides)."""
    for name in ("MODEL_PATH", "DATA_DIR", "SKYRL_DIR", "CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR",
                 "MAX_TRAINING_STEPS", "CKPT_INTERVAL", "RESUME_MODE", "BEAM_CONTAINER_IMAGE", "BEAM_SLURM_HOME",
                 "BEAM_TRAINER_BACKEND", "XDG_STATE_HOME", "BEAM_EXPORTS_ROOT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "model").mkdir()
    dapo = tmp_path / "skyrl" / "examples" / "train" / "algorithms" / "dapo"
    dapo.mkdir(parents=True)
    (dapo / "main_dapo.py").touch()  # what submit's path check looks for in a SkyRL checkout
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MODEL_PATH", str(tmp_path / "model"))
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SKYRL_DIR", str(tmp_path / "skyrl"))
    return tmp_path, make_sources(tmp_path / "sources")
