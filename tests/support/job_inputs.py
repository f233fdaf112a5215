"""Real folders for the paths a training job reads, so `plan`/`submit` path checks have something to find."""

from __future__ import annotations

from pathlib import Path

DATA_FILES = ("dapo-math-17k-cleaned.parquet", "aime-2025-cleaned.parquet", "aime-2024-cleaned.parquet")
DAPO_MODULE_FILE = Path("examples/train/algorithms/dapo/main_dapo.py")


def make_job_inputs(root: Path) -> dict[str, Path]:
    """A model folder, a SkyRL checkout (the DAPO module the job runs) and a data folder with the three files."""
    paths = {"model_path": root / "model", "skyrl_dir": root / "SkyRL", "data_dir": root / "data"}
    paths["model_path"].mkdir(parents=True)
    (paths["skyrl_dir"] / DAPO_MODULE_FILE).parent.mkdir(parents=True)
    (paths["skyrl_dir"] / DAPO_MODULE_FILE).write_text("# the DAPO experiment of a SkyRL checkout\n")
    paths["data_dir"].mkdir(parents=True)
    for name in DATA_FILES:
        (paths["data_dir"] / name).write_bytes(b"PAR1")
    return paths


def path_overrides(paths: dict[str, Path]) -> list[str]:
    return [f"paths.{key}={value}" for key, value in paths.items()]
