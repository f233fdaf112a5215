"""Inputs for pipeline tests: small DAPO/AIME source files and the container test double on PATH.
Plain module (not conftest) so test files can import it by name."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

from dapo_inputs import aime2024_rows, random_rows, write_aime2025_yentinglin, write_dapo

FAKE_IMPORT = TESTS / "support" / "test_doubles" / "fake_image_import"
IMAGE = "ghcr.io/example/skyrl:beam-release"


def make_sources(root: Path) -> list[str]:
    """Write small source files and return the data.* overrides that point the data stage at them."""
    root.mkdir(parents=True, exist_ok=True)
    dapo = write_dapo(root / "dapo.parquet", random_rows(0, 200))
    aime24 = write_dapo(root / "aime24.parquet", aime2024_rows())
    aime25 = write_aime2025_yentinglin(root / "aime25.parquet")
    return [f"data.dapo_math={dapo}", f"data.aime2024={aime24}", f"data.aime2025={aime25}"]


def fake_runtime_bin(directory: Path) -> Path:
    """A bin folder whose `enroot` is the container test double (no container runtime exists here)."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "enroot"
    if not link.exists():
        link.symlink_to(FAKE_IMPORT)
    return directory
