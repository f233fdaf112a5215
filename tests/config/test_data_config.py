"""The data section of the recipe: composed by Hydra with the rest of the schema, typed, checked by key."""

from __future__ import annotations

import pytest

from beam_slurm.config.data import DataConfig
from beam_slurm.config.load import load_config
from beam_slurm.config.verb_args import schema_keys
from beam_slurm.core.errors import ConfigError


def data_of(overrides: list[str]) -> DataConfig:
    return load_config(overrides, validate=False).data


def test_overrides_are_typed():
    config = data_of(["data.aime2025=[a.jsonl,b.jsonl]", "data.batch_rows=10", "data.out_dir=/x y"])
    assert config.aime2025_sources() == ["a.jsonl", "b.jsonl"]
    assert config.batch_rows == 10 and config.out_dir == "/x y"
    assert data_of(["data.aime2025=one.parquet"]).aime2025_sources() == ["one.parquet"]
    assert data_of([]) == DataConfig()  # the schema's dataclass holds the only defaults


@pytest.mark.parametrize(
    "override, message",
    [("data.batch_rows=0", "data.batch_rows=0: must be >= 1"), ("data.aime2025=[]", "data.aime2025 must be"),
     ("data.dapo_math=", "data.dapo_math must be")],
)
def test_bad_values_name_the_key(override, message):
    assert any(message in p for p in data_of([override]).problems())


@pytest.mark.parametrize("override, key", [("data.hub_retries=x", "data.hub_retries"), ("data.outdir=/x", "data.outdir")])
def test_bad_keys_and_types_name_the_key(override, key):
    with pytest.raises(ConfigError) as error:
        data_of([override])
    assert [p.key for p in error.value.problems] == [key]


def test_every_field_has_a_docstring():
    data_keys = {k: v for k, v in schema_keys().items() if k.startswith("data.")}
    assert len(data_keys) == 8
    assert all(entry.doc for entry in data_keys.values()), [k for k, v in data_keys.items() if not v.doc]
