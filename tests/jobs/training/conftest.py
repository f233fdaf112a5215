"""Fixtures for the training tests on the Slurm sandbox (helpers in train_runs.py)."""

from __future__ import annotations

import pytest
from train_runs import TrainRun


@pytest.fixture
def train_run(slurm_sandbox):
    """Factory: train_run(steps, ckpt_interval, ...) -> a TrainRun in a fresh shared folder."""

    def make(steps: int, ckpt_interval: int, **kwargs) -> TrainRun:
        return TrainRun(slurm_sandbox, slurm_sandbox.new_dir("train"), steps, ckpt_interval, **kwargs)

    return make
