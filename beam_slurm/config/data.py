"""Settings of `beam-slurm prepare-data`: the `data` section of the recipe schema (`data.<key>=<value>`).

Sources are a local path or a hub address (syntax: beam_slurm.jobs.data.sources); the defaults are the hub files the
seed
recipe uses, so with hub access `beam-slurm prepare-data data.out_dir=DIR` is enough. Redoing existing outputs is the
verb's `--force` flag, not a setting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from beam_slurm.core.errors import BadDataInput


@dataclass
class DataConfig:
    """The data stage: its source datasets and where the cleaned files go."""

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
    out_dir: str | None = None
    """Directory for the cleaned parquet files and the manifest; empty = paths.data_dir (env DATA_DIR). Created if
    missing. Existing outputs are kept when the manifest shows they come from the same sources; `--force` rebuilds
    them."""
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

    def problems(self) -> list[str]:
        """What is wrong with these settings, one message per setting (empty = nothing)."""
        out = [
            message
            for wrong, message in (
                (self.batch_rows < 1, f"data.batch_rows={self.batch_rows}: must be >= 1"),
                (self.hub_retries < 1, f"data.hub_retries={self.hub_retries}: must be >= 1"),
                (not str(self.aime2025_data_source).strip(), "data.aime2025_data_source: must not be empty"),
                *(
                    (
                        not isinstance(value, str) or not value.strip(),
                        f"data.{name} must be one local path or hub address (got {value!r})",
                    )
                    for name, value in (("dapo_math", self.dapo_math), ("aime2024", self.aime2024))
                ),
            )
            if wrong
        ]
        try:
            self.aime2025_sources()
        except BadDataInput as error:
            out.append(str(error))
        return out

    def aime2025_sources(self) -> list[str]:
        """The AIME 2025 sources as a list (the setting takes one value or a list)."""
        values = list(self.aime2025) if isinstance(self.aime2025, (list, tuple)) else [self.aime2025]
        if not values or any(not isinstance(v, str) or not v.strip() for v in values):
            raise BadDataInput(f"data.aime2025 must be a path/hub address or a list of them (got {self.aime2025!r})")
        return [str(v) for v in values]

    def resolved_out_dir(self, data_dir: str | None) -> str:
        """out_dir, or `data_dir` (paths.data_dir, env DATA_DIR) when unset."""
        value = self.out_dir or data_dir
        if not value:
            raise BadDataInput(
                "data.out_dir is not set and paths.data_dir (env DATA_DIR) is empty: pass "
                "data.out_dir=<directory> (or export DATA_DIR=<directory>)"
            )
        return value
