"""The streamed rule against the polars reference, row for row (extra_info of the first occurrence included)."""

from __future__ import annotations

import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest
from dapo_inputs import KEY, aime2024_rows, random_rows, reference_clean, tricky_rows, write_dapo

from beam_slurm.jobs.data.cleaning import clean_dapo_files


@pytest.mark.parametrize("batch_rows", [1, 4, 7, 10_000])
def test_tricky_rows_match_reference(tmp_path, batch_rows):
    source = write_dapo(tmp_path / "in.parquet", tricky_rows(), row_group_size=5)
    stats = clean_dapo_files([source], tmp_path / "out.parquet", where="data.dapo_math", batch_rows=batch_rows)

    expected = reference_clean(pl.read_parquet(source))
    got = pl.read_parquet(tmp_path / "out.parquet")
    assert got.to_dicts() == expected.to_dicts()
    kept = [r["extra_info"]["index"] if r["extra_info"] else None for r in got.to_dicts()]
    # First occurrences survive; both conflicts (answers, data sources, styles) are gone.
    assert kept == ["a", "c", "g", "h", "i", "j", "k", "m", "n", "s", None, None]
    assert stats.rows_in == len(tricky_rows()) and stats.rows_out == len(kept)
    assert stats.prompts_conflicting == 3


@pytest.mark.parametrize("seed", range(6))
def test_random_inputs_match_reference(tmp_path, seed):
    source = write_dapo(tmp_path / "in.parquet", random_rows(seed, 600), row_group_size=97)
    stats = clean_dapo_files([source], tmp_path / "out.parquet", where="x", batch_rows=53)
    expected = reference_clean(pl.read_parquet(source))
    got = pl.read_parquet(tmp_path / "out.parquet")
    assert got.to_dicts() == expected.to_dicts()
    assert stats.rows_distinct == pl.read_parquet(source).unique(subset=KEY).height


def test_several_files_are_one_input(tmp_path):
    rows = random_rows(11, 300)
    files = [write_dapo(tmp_path / f"part-{i}.parquet", rows[i * 100:(i + 1) * 100]) for i in range(3)]
    clean_dapo_files(files, tmp_path / "out.parquet", where="x", batch_rows=64)
    expected = reference_clean(pl.concat([pl.read_parquet(f) for f in files]))
    assert pl.read_parquet(tmp_path / "out.parquet").to_dicts() == expected.to_dicts()


def test_same_row_set_as_skyrl_pandas_pipeline(tmp_path):
    """SkyRL's own path (pandas -> polars, keep any) keeps the same key rows; only its order and extra_info vary."""
    source = write_dapo(tmp_path / "in.parquet", tricky_rows() + random_rows(3, 400))
    clean_dapo_files([source], tmp_path / "out.parquet", where="x")
    skyrl = pl.from_pandas(pd.read_parquet(source)).unique(subset=KEY)
    skyrl = skyrl.with_columns(pl.col("reward_model").n_unique().over("prompt").alias("n_rm"))
    skyrl = skyrl.filter(pl.col("n_rm") == 1).drop("n_rm")
    ours = pl.read_parquet(tmp_path / "out.parquet")
    assert sorted(map(repr, ours.select(KEY).to_dicts())) == sorted(map(repr, skyrl.select(KEY).to_dicts()))


def test_output_keeps_the_input_schema(tmp_path):
    source = write_dapo(tmp_path / "in.parquet", tricky_rows())
    clean_dapo_files([source], tmp_path / "out.parquet", where="x")
    assert pq.read_schema(tmp_path / "out.parquet").equals(pq.read_schema(source), check_metadata=False)


def test_aime2024_copies_collapse_to_30_and_padding_is_not_a_conflict(tmp_path):
    source = write_dapo(tmp_path / "aime.parquet", aime2024_rows(zero_pad=True))
    stats = clean_dapo_files([source], tmp_path / "out.parquet", where="x", canonical_answers=True, batch_rows=100)
    got = pl.read_parquet(tmp_path / "out.parquet")
    assert stats.rows_in == 960 and got.height == 30
    assert stats.answers_canonicalised == sum(1 for r in aime2024_rows(zero_pad=True) if r["reward_model"]["ground_truth"].startswith("0"))
    # Reference: canonicalise first, then the rule.
    reference = pl.read_parquet(source).with_columns(
        pl.col("reward_model").struct.with_fields(
            pl.field("ground_truth").str.strip_chars().cast(pl.Int64).cast(pl.String).alias("ground_truth")
        )
    )
    assert got.to_dicts() == reference_clean(reference).to_dicts()
    # Without canonical answers the padded copies conflict with the plain ones, as SkyRL's rule says.
    clean_dapo_files([source], tmp_path / "raw.parquet", where="x", canonical_answers=False)
    assert pl.read_parquet(tmp_path / "raw.parquet").to_dicts() == reference_clean(pl.read_parquet(source)).to_dicts()


@pytest.mark.parametrize("lookup_bytes", [0, 300])
def test_digest_path_past_the_lookup_budget_matches_reference(tmp_path, monkeypatch, lookup_bytes):
    """Columns with more distinct text than the in-Arrow lookup budget switch to digests, with the same result."""
    from beam_slurm.jobs.data import cleaning

    monkeypatch.setattr(cleaning, "_LOOKUP_BYTES", lookup_bytes)
    rows = tricky_rows() + random_rows(8, 500) + tricky_rows()
    source = write_dapo(tmp_path / "in.parquet", rows)
    clean_dapo_files([source], tmp_path / "out.parquet", where="x", batch_rows=37)
    expected = reference_clean(pl.read_parquet(source))
    assert pl.read_parquet(tmp_path / "out.parquet").to_dicts() == expected.to_dicts()
