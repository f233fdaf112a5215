"""Settings of `beam-slurm prepare-data`: one dataclass, parsed from `data.<key>=<value>` overrides.

Sources are either a local path or a hub address (see beam_slurm.data.sources for the syntax); the defaults are the
hub files the seed recipe uses, so on a machine with hub access `beam-slurm prepare-data data.out_dir=DIR` is enough.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from beam_slurm.data.errors import BadDataInput

OVERRIDE_PREFIX = "data."


@dataclass
class DataConfig:
    """Where the three source datasets come from, where the cleaned files go, and how the stage behaves."""

    dapo_math: str = "hf://datasets/BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet"
    """DAPO-Math-17K in the DAPO format (~1.79M rows, ~17.4K distinct prompts): a local parquet file or directory of
    parquet files, or `hf://datasets/<owner>/<name>[@<revision>][/<path-in-repo>]`."""
    aime2024: str = "hf://datasets/BytedTsinghua-SIA/AIME-2024/data/aime-2024.parquet"
    """AIME 2024 in the DAPO format (960 rows = 30 problems x 32 copies); cleaned with the same rule to 30 rows."""
    aime2025: Any = "hf://datasets/yentinglin/aime_2025"
    """AIME 2025 problems with integer answers, converted here into the DAPO format. One source or a list of them
    (e.g. `[aime2025-I.jsonl,aime2025-II.jsonl]`), read in the order given; parquet, jsonl or json. Detected column
    layouts: `problem`/`answer` (yentinglin/aime_2025, MathArena/aime_2025, int or string answers) and
    `question`/`answer` (opencompass/AIME2025). A hub address without a file takes every parquet (else jsonl) file of
    the repository in name order. Default yentinglin/aime_2025: the most widely used copy, both contests (I then II)
    in one file."""
    out_dir: Optional[str] = None
    """Directory for the cleaned parquet files and the manifest; empty = $DATA_DIR. Created if missing."""
    overwrite: bool = False
    """Replace outputs that already exist. Without it an output is kept when the manifest shows it was produced
    from the same source and is unchanged, and the stage stops (exit 2) on any other existing file."""
    aime2025_data_source: str = "aime2025"
    """`data_source` value of the converted AIME 2025 rows; evaluation metrics are keyed by it
    (eval/<data_source>/avg_score)."""
    canonical_aime_answers: bool = True
    """Rewrite integer ground truths of AIME 2024 to canonical form ("025" -> "25") before cleaning, since the DAPO
    reward compares strings. AIME 2025 answers are always canonical. No effect on the DAPO-Math-17K file."""
    batch_rows: int = 32768
    """Rows per streamed batch; bounds memory (DAPO-Math-17K: ~350 MB peak at 32768, ~500 MB at 65536, where
    the run is a little faster)."""
    hub_retries: int = 5
    """Attempts per hub download on network errors, with exponential back-off (1, 2, 4... s, at most 30 s).
    Downloads resume from the partial file. HF_HUB_OFFLINE=1 uses the local cache only; HF_TOKEN is used if set."""

    def __post_init__(self) -> None:
        # Runs for OmegaConf.to_object as well, so every path into the stage is checked.
        if self.batch_rows < 1:
            raise BadDataInput(f"data.batch_rows must be >= 1 (got {self.batch_rows})")
        if self.hub_retries < 1:
            raise BadDataInput(f"data.hub_retries must be >= 1 (got {self.hub_retries})")
        if not self.aime2025_data_source.strip():
            raise BadDataInput("data.aime2025_data_source must not be empty")
        for name in ("dapo_math", "aime2024"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise BadDataInput(f"data.{name} must be one local path or hub address (got {value!r})")
        self.aime2025_sources()

    def aime2025_sources(self) -> list[str]:
        """The AIME 2025 sources as a list (the setting takes one value or a list)."""
        values = list(self.aime2025) if isinstance(self.aime2025, (list, tuple)) else [self.aime2025]
        if not values or any(not isinstance(v, str) or not v.strip() for v in values):
            raise BadDataInput(
                f"data.aime2025 must be a path/hub address or a list of them (got {self.aime2025!r})"
            )
        return [str(v) for v in values]

    def resolved_out_dir(self) -> str:
        """out_dir, or $DATA_DIR when unset."""
        value = self.out_dir or os.environ.get("DATA_DIR")
        if not value:
            raise BadDataInput(
                "data.out_dir is not set and DATA_DIR is empty: pass data.out_dir=<directory> "
                "(or export DATA_DIR=<directory>)"
            )
        return value


def valid_keys() -> list[str]:
    """The setting names accepted after `data.`."""
    return [f.name for f in fields(DataConfig)]


def parse_overrides(argv: list[str]) -> DataConfig:
    """Build a DataConfig from `data.<key>=<value>` arguments; unknown keys and bad values raise BadDataInput."""
    dotlist: list[str] = []
    keys = valid_keys()
    for arg in argv:
        key, sep, _ = arg.partition("=")
        if not sep or not key.startswith(OVERRIDE_PREFIX):
            raise BadDataInput(
                f"unexpected argument {arg!r}: settings are given as data.<key>=<value>; "
                f"valid keys: {', '.join('data.' + k for k in keys)}"
            )
        short = key[len(OVERRIDE_PREFIX):]
        if short not in keys:
            raise BadDataInput(
                f"unknown setting {key!r}; valid keys: {', '.join('data.' + k for k in keys)}"
            )
        dotlist.append(arg[len(OVERRIDE_PREFIX):])
    try:
        merged = OmegaConf.merge(OmegaConf.structured(DataConfig), OmegaConf.from_dotlist(dotlist))
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "?"
        first_line = (getattr(error, "msg", None) or str(error)).splitlines()[0]
        raise BadDataInput(f"bad value for data.{key}: {first_line}") from None
    assert isinstance(config, DataConfig)
    return config
