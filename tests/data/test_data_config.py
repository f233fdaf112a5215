"""DataConfig parsing from data.* overrides, and conf/data/default.yaml kept equal to its defaults."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from beam_slurm.data.config import DataConfig, parse_overrides, valid_keys
from beam_slurm.data.errors import BadDataInput

REPO = Path(__file__).resolve().parents[2]


def test_yaml_mirrors_the_dataclass_defaults():
    yaml = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "data" / "default.yaml"))
    assert yaml == asdict(DataConfig())


def test_overrides_are_typed():
    config = parse_overrides(["data.aime2025=[a.jsonl,b.jsonl]", "data.overwrite=true", "data.batch_rows=10",
                              "data.out_dir=/x y"])
    assert config.aime2025_sources() == ["a.jsonl", "b.jsonl"]
    assert config.overwrite is True and config.batch_rows == 10 and config.out_dir == "/x y"
    assert parse_overrides(["data.aime2025=one.parquet"]).aime2025_sources() == ["one.parquet"]


@pytest.mark.parametrize(
    "override, message",
    [("data.batch_rows=0", "data.batch_rows must be >= 1"), ("data.hub_retries=x", "data.hub_retries"),
     ("data.aime2025=[]", "data.aime2025 must be"), ("data.dapo_math=", "data.dapo_math"),
     ("data.outdir=/x", "unknown setting 'data.outdir'")],
)
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(BadDataInput, match=message):
        parse_overrides([override])


def test_every_field_has_a_docstring():
    source = (REPO / "beam_slurm" / "data" / "config.py").read_text()
    for key in valid_keys():
        block = source.split(f"\n    {key}:", 1)[1]
        assert block.split("\n", 2)[1].strip().startswith('"""'), key
