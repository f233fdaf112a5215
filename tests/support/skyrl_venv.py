"""Run Python code in the SkyRL venv (.venv-skyrl, Python 3.12, skyrl 0.3.0) and return its JSON output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKYRL_PYTHON = ROOT / ".venv-skyrl" / "bin" / "python"


def require_skyrl_venv() -> Path:
    if not SKYRL_PYTHON.exists():
        pytest.skip("SkyRL venv missing: run tools/install.sh 40-skyrl")
    return SKYRL_PYTHON


def run_in_skyrl_venv(code: str, *args: str, timeout: float = 120) -> dict:
    """Run `code` with args in sys.argv[1:]; it must print one JSON object as its last stdout line."""
    python = require_skyrl_venv()
    proc = subprocess.run(
        [str(python), "-c", code, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise AssertionError(f"SkyRL venv program failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
