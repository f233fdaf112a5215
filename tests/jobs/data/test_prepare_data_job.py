"""sbatch/prepare_data.sh: finds the checkout from any directory, directly and as a real Slurm job."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dapo_inputs import aime2024_rows, random_rows, tricky_rows, write_aime2025_matharena, write_dapo

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "sbatch" / "prepare_data.sh"


def _sources(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    return [
        f"data.dapo_math={write_dapo(directory / 'dapo.parquet', tricky_rows() + random_rows(2, 200))}",
        f"data.aime2024={write_dapo(directory / 'aime2024.parquet', aime2024_rows())}",
        f"data.aime2025={write_aime2025_matharena(directory / 'aime2025.parquet')}",
    ]


def _env_without_home() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("BEAM_SLURM_HOME", "SLURM_JOB_ID")}


def test_script_runs_from_another_directory(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), *_sources(tmp_path / "src"), f"data.out_dir={out}"], cwd=tmp_path,
                          capture_output=True, text=True, env=_env_without_home(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert pq.ParquetFile(out / "aime-2025-cleaned.parquet").metadata.num_rows == 30


def test_script_names_a_wrong_checkout(tmp_path):
    env = {**_env_without_home(), "BEAM_SLURM_HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "set BEAM_SLURM_HOME" in proc.stderr


def test_script_passes_exit_status_2_through(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "data.nope=1"], cwd=tmp_path, capture_output=True, text=True,
                          env=_env_without_home(), timeout=60)
    assert proc.returncode == 2 and "beam-slurm prepare-data: " in proc.stderr and "data.nope='1': unknown key" in proc.stderr


@pytest.mark.sandbox
def test_prepare_data_as_a_slurm_job(slurm_sandbox):
    """Submitted from an unrelated directory without BEAM_SLURM_HOME: Slurm runs a spooled copy of the script.

    --mem overrides the script's 8G header: the sandbox nodes are small.
    """
    job_dir = slurm_sandbox.new_dir("prepare-data")
    out = job_dir / "data"
    proc = subprocess.run(
        ["sbatch", "--parsable", "--mem=500M", f"--chdir={job_dir}", f"--output={job_dir}/job-%j.out", str(SCRIPT),
         *_sources(job_dir / "src"), f"data.out_dir={out}"],
        cwd=job_dir, capture_output=True, text=True, env=slurm_sandbox.env(_env_without_home()), timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    state = slurm_sandbox.wait(job_id, timeout=180)
    log = next(job_dir.glob("job-*.out")).read_text()
    assert state == "COMPLETED", log
    assert {p.name for p in out.glob("*.parquet")} == {
        "dapo-math-17k-cleaned.parquet", "aime-2024-cleaned.parquet", "aime-2025-cleaned.parquet"}
    assert "aime-2025-cleaned.parquet: 30 rows" in log
