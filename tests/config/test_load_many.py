"""`load_many` (a sweep's points composed once per recipe choice) gives exactly what `load_config` gives per point:
the same typed recipe, the same environment sources, the same problems for a bad point."""

from __future__ import annotations

import dataclasses

import pytest

from beam_slurm.config.load import load_config, load_many
from beam_slurm.config.sources import env_sources
from beam_slurm.core.errors import ConfigError


def _one(overrides):
    try:
        return load_config(overrides, validate=False)
    except ConfigError as exc:
        return exc


def _same(expected, got) -> None:
    if isinstance(expected, ConfigError):
        assert isinstance(got, ConfigError), got
        assert [str(p) for p in got.problems] == [str(p) for p in expected.problems]
        return
    assert not isinstance(got, ConfigError), got
    assert dataclasses.asdict(got) == dataclasses.asdict(expected)
    assert env_sources(got) == env_sources(expected)


POINTS = [
    ["recipe=lora_16gpu", "algorithm.lr=1e-5", "lora.rank=8", "generation.temperature=0.7"],
    ["recipe=lora_16gpu", "algorithm.lr=4e-5", "lora.rank=64", "generation.temperature=1.0"],
    ["lora.rank=16", "recipe=lora_32gpu"],                      # a group override after a value one
    ["recipe=bf16_64gpu", "cluster.nodes=16", "max_training_steps=3"],
    ["recipe=lora_16gpu", "lora.rank=8", "lora.rank=32"],      # the last of a repeated key wins, as in Hydra
    ["recipe=lora_16gpu", "trainer.extra_env={A: x, B: '1'}"],  # a whole mapping
    ["recipe=lora_16gpu", "+trainer.extra_env.C=y"],
    ["recipe=lora_16gpu", "run_name='a b'", "paths.ckpt_path=/c"],
    [],
]
BAD = [
    ["recipe=lora_16gpu", "lora.rnak=8"],                      # unknown key
    ["recipe=lora_16gpu", "lora.rank=eight"],                  # wrong type
    ["recipe=no_such_recipe", "lora.rank=8"],                  # unknown recipe
    ["recipe=lora_16gpu", "cluster.nodes=[1"],                 # unparsable
]


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "MAX_TRAINING_STEPS", "CKPT_INTERVAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MODEL_PATH", "/models/beam")


def test_each_point_is_what_load_config_gives(env):
    results = load_many(POINTS + BAD)
    for expected, got in zip([_one(p) for p in POINTS + BAD], results):
        _same(expected, got)
    assert [isinstance(r, ConfigError) for r in results] == [False] * len(POINTS) + [True] * len(BAD)
    assert results[4].lora.rank == 32 and results[2].recipe == "lora_32gpu" and results[3].cluster.nodes == 16


def test_a_bad_environment_value_is_named_with_its_variable_for_every_point(env, monkeypatch):
    monkeypatch.setenv("MAX_TRAINING_STEPS", "many")
    points = [["recipe=lora_16gpu", f"lora.rank={r}"] for r in (8, 16)]
    results = load_many(points)
    for expected, got in zip([_one(p) for p in points], results):
        _same(expected, got)
    assert all(isinstance(r, ConfigError) and r.problems[0].env == "MAX_TRAINING_STEPS" for r in results)


def test_points_do_not_share_state(env):
    first, second = load_many([["lora.rank=8", "trainer.extra_env={A: x}"], ["lora.rank=16"]])
    assert (first.lora.rank, second.lora.rank) == (8, 16)
    assert first.trainer.extra_env == {"A": "x"} and second.trainer.extra_env == {}
    first.cluster.nodes = 99
    assert load_many([[]])[0].cluster.nodes != 99


def test_saved_recipe_text_is_what_omegaconf_writes(env):
    """to_yaml dumps without building an OmegaConf node first; the text is OmegaConf.to_yaml's, byte for byte."""
    from omegaconf import OmegaConf

    from beam_slurm.config.load import to_yaml
    from beam_slurm.config.overrides import escape_interpolation

    def escaped(value):
        if isinstance(value, str):
            return escape_interpolation(value)
        if isinstance(value, list):
            return [escaped(v) for v in value]
        if isinstance(value, dict):
            return {k: escaped(v) for k, v in value.items()}
        return value

    for overrides in (["recipe=mxfp8_64gpu"], ["recipe=lora_16gpu", "run_name=1e5", "paths.model_path='/m/\\${x}/ü'",
                                              "trainer.extra_env={A: 'true', B: '010', C: 'null', D: '1.5'}"]):
        cfg = load_config(overrides, validate=False)
        expected = OmegaConf.to_yaml(OmegaConf.create(escaped(dataclasses.asdict(cfg))))
        assert to_yaml(cfg) == expected
        assert "'true'" in expected or overrides[0] == "recipe=mxfp8_64gpu"
