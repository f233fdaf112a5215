"""Slurm's value grammars (beam_slurm.slurm.values): `--time` as sbatch reads it, durations as scontrol prints them,
`--mem` sizes and partition lists; properties over the documented grammar, and the recipe keys that use them."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_slurm.config.load import load_config
from beam_slurm.core.errors import ConfigError
from beam_slurm.slurm.values import (
    SlurmValueError,
    describe_seconds,
    memory_megabytes,
    partition_names,
    reported_seconds,
    time_limit_seconds,
)

BASE = ["recipe=lora_16gpu", "trainer.backend=rehearsal", "paths.model_path=/m", "paths.data_dir=/d"]


@pytest.mark.parametrize("text, seconds", [
    ("30:00", 1800), ("4:00", 240), ("0:04:00", 240), ("90", 5400), ("1-00", 86400), ("2-12", 216000),
    ("1-2:30", 95400), ("1-00:00:01", 86460), ("0:30", 60), ("24:00:00", 86400), ("120:00", 7200),
])
def test_time_limits_read_as_sbatch_reads_them(text, seconds):
    assert time_limit_seconds(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "infinite", "0", "-1"])
def test_no_limit_forms(text):
    assert time_limit_seconds(text) is None


@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "-5", "1-2-3", "1.5", "", "1-", ":30", "1h"])
def test_what_sbatch_refuses_is_refused(text):
    with pytest.raises(SlurmValueError, match="D-HH:MM:SS"):
        time_limit_seconds(text)


@given(st.integers(0, 400), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_every_documented_form_of_a_duration_reads_back(days, hours, minutes, seconds):
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    expected = math.ceil(total / 60) * 60 or None  # Slurm rounds seconds up to the minute; 0 is no limit
    assert time_limit_seconds(f"{days}-{hours}:{minutes:02d}:{seconds:02d}") == expected
    assert time_limit_seconds(f"{days * 24 + hours}:{minutes:02d}:{seconds:02d}") == expected
    assert time_limit_seconds(f"{(days * 24 + hours) * 60 + minutes}:{seconds:02d}") == expected
    assert time_limit_seconds(str((days * 24 + hours) * 60 + minutes)) == ((total - seconds) or None)
    assert time_limit_seconds(f"{days}-{hours}") == ((days * 24 + hours) * 3600 or None)
    assert time_limit_seconds(f"{days}-{hours}:{minutes}") == (((days * 24 + hours) * 60 + minutes) * 60 or None)


@given(st.integers(0, 400 * 86400))
def test_what_scontrol_prints_reads_back_to_the_same_seconds(total):
    days, rest = divmod(total, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    assert reported_seconds(f"{days}-{clock}" if days else clock) == total


def test_reported_durations_keep_the_output_grammar_apart():
    # A bare number is seconds in scontrol's output (GraceTime=20) but minutes in --time.
    assert reported_seconds("20") == 20 and time_limit_seconds("20") == 1200
    assert [reported_seconds(t) for t in ("UNLIMITED", "Partition_Limit", "NONE", "INVALID", "", None, "1-x")] == \
        [None] * 7
    assert reported_seconds("05:00") == 300


def test_describe_seconds_for_plan_rows():
    assert [describe_seconds(s) for s in (1800, 5400, 86400, 93600, None)] == \
        ["30 min", "1 h 30 min", "1 d", "1 d 2 h", "no limit"]


@pytest.mark.parametrize("text, megabytes", [("1800G", 1800 * 1024), ("0", 0), ("512", 512), ("512M", 512),
                                             ("2T", 2 * 1024 * 1024), ("1024K", 1), ("1k", 1)])
def test_memory_sizes(text, megabytes):
    assert memory_megabytes(text) == megabytes


@pytest.mark.parametrize("text", ["abc", "1.5G", "-1", "12GB", ""])
def test_bad_memory_sizes(text):
    with pytest.raises(SlurmValueError, match="K, M, G or T"):
        memory_megabytes(text)


def test_partition_lists():
    assert partition_names("batch,low") == ["batch", "low"] and partition_names("gpu") == ["gpu"]
    for bad in ("", "a b", "batch,,low", "batch;low"):
        with pytest.raises(SlurmValueError):
            partition_names(bad)


def test_the_recipe_takes_every_time_limit_slurm_takes():
    for text in ("30:00", "90", "1-00", "UNLIMITED", "2-00:00:00"):
        assert load_config([*BASE, f"cluster.time_limit={text}"]).cluster.time_limit == text
    with pytest.raises(ConfigError) as refused:
        load_config([*BASE, "cluster.time_limit=4:00"])  # 4 minutes: the 300 s notice cannot come before it
    assert "cluster.signal_before_s" in str(refused.value) and "4:00 = 4 min" in str(refused.value)
    with pytest.raises(ConfigError, match="cluster.time_limit"):
        load_config([*BASE, "cluster.time_limit=30h"])


def test_memory_and_partition_keys_are_read_as_slurm_reads_them():
    with pytest.raises(ConfigError) as refused:
        load_config([*BASE, "cluster.mem_per_node=abc"])
    assert "cluster.mem_per_node" in str(refused.value) and "1800G" in str(refused.value)
    assert load_config([*BASE, "cluster.mem_per_node=1800G"]).cluster.mem_per_node == "1800G"
    assert load_config([*BASE, "cluster.partition='batch,low'"]).cluster.partition == "batch,low"
    with pytest.raises(ConfigError, match="cluster.partition"):
        load_config([*BASE, "cluster.partition='a b'"])
    # Unquoted, Hydra reads the comma as a sweep: the refusal says to quote it (or -m for a sweep of numbers).
    with pytest.raises(ConfigError) as unquoted:
        load_config([*BASE, "cluster.partition=batch,low"])
    assert "quote it (cluster.partition='batch,low'" in str(unquoted.value), str(unquoted.value)
    with pytest.raises(ConfigError) as sweep:
        load_config([*BASE, "cluster.nodes=2,4"])
    assert "add -m to sweep cluster.nodes over 2,4" in str(sweep.value), str(sweep.value)


def test_sbatch_variables_are_read_as_sbatch_reads_them_and_a_key_still_wins(monkeypatch):
    from beam_slurm.config.sources import env_sources

    monkeypatch.setenv("SBATCH_TIMELIMIT", "30:00")
    monkeypatch.setenv("SBATCH_PARTITION", "low")
    cfg = load_config(BASE)
    assert (cfg.cluster.time_limit, cfg.cluster.partition) == ("30:00", "low")
    assert env_sources(cfg)["cluster.time_limit"] == "SBATCH_TIMELIMIT"
    given = load_config([*BASE, "cluster.time_limit=2:00:00", "cluster.partition=batch"])
    assert (given.cluster.time_limit, given.cluster.partition) == ("2:00:00", "batch")
    monkeypatch.setenv("SBATCH_TIMELIMIT", "30h")
    with pytest.raises(ConfigError) as refused:
        load_config(BASE)
    assert "SBATCH_TIMELIMIT" in str(refused.value)  # the setting's variable is named
    monkeypatch.delenv("SBATCH_TIMELIMIT")
    assert load_config(BASE).cluster.time_limit == "24:00:00"


def test_extra_sbatch_args_may_not_set_what_a_key_sets():
    with pytest.raises(ConfigError) as refused:
        load_config([*BASE, "cluster.extra_sbatch_args=['--time=1:00:00','--nodes=4','--exclusive=user']"])
    text = str(refused.value)
    assert "--time is set by cluster.time_limit" in text and "--nodes is set by cluster.nodes" in text
    assert "exclusive" not in text
    with pytest.raises(ConfigError, match="--constraint is set by cluster.constraint"):
        load_config([*BASE, "cluster.extra_sbatch_args=['--constraint=b200']"])
    with pytest.raises(ConfigError, match="cluster.nodes"):
        load_config([*BASE, "cluster.extra_sbatch_args=['-N4']"])
    assert load_config([*BASE, "cluster.extra_sbatch_args=['--exclusive','--hold']"]).cluster.extra_sbatch_args
