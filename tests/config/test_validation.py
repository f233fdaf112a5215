"""Bad settings fail before anything is submitted, naming the key and the fix (exit status 2)."""

import subprocess
import sys

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.core.errors import ConfigError

PATHS = ["paths.model_path=/shared/models/beam", "paths.data_dir=/shared/data", "paths.skyrl_dir=/shared/SkyRL"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("MODEL_PATH", "DATA_DIR", "SKYRL_DIR", "RESUME_MODE", "MAX_TRAINING_STEPS", "CKPT_INTERVAL",
                "KV_CACHE_DTYPE", "RUN_NAME", "OPTIMIZER_STATE_DISK_DIR"):
        monkeypatch.delenv(var, raising=False)


BAD = [
    # (overrides, key that must be named, words the fix must contain)
    (["recipe=lora_16gpu", "megatron.tensor_parallel=3"], "megatron.tensor_parallel", "divide"),
    (["recipe=lora_16gpu", "megatron.expert_parallel=16"], "megatron.expert_parallel", "EP x ETP"),
    (["recipe=lora_32gpu", "rollout.num_engines=3"], "rollout.num_engines", "must equal"),
    (["recipe=lora_32gpu", "rollout.tensor_parallel=5"], "rollout.num_engines", "must equal"),
    (["recipe=lora_32gpu", "batch.mini_batches=3"], "batch.mini_batches", "divide"),
    (["recipe=lora_32gpu", "batch.prompts_per_step=63", "batch.mini_batches=1", "batch.responses_per_prompt=3"],
     "batch.prompts_per_step", "data-parallel"),
    (["recipe=lora_32gpu", "megatron.micro_batch_size=3"], "megatron.micro_batch_size", "divide"),
    (["recipe=lora_32gpu", "batch.responses_per_prompt=1"], "batch.responses_per_prompt", "at least 2"),
    (["recipe=lora_32gpu", "precision=fp4"], "precision", "bf16"),
    (["recipe=lora_32gpu", "precision=mxfp8"], "precision", "lora.rank=0"),
    (["recipe=lora_32gpu", "rollout.kv_cache_dtype=int4"], "rollout.kv_cache_dtype", "fp8_e4m3"),
    (["recipe=lora_32gpu", "rollout.attention=fa3"], "rollout.attention", "fa2"),
    (["recipe=lora_32gpu", "checkpoint.resume_mode=sometimes"], "checkpoint.resume_mode", "latest"),
    (["recipe=lora_32gpu", "checkpoint.resume_mode=from_path"], "checkpoint.resume_path", "global_step_N"),
    (["recipe=lora_32gpu", "checkpoint.resume_path=/ck/global_step_10"], "checkpoint.resume_path", "from_path"),
    (["recipe=lora_32gpu", "checkpoint.interval=0"], "checkpoint.interval", "positive"),
    (["recipe=lora_32gpu", "max_training_steps=-5"], "max_training_steps", "positive"),
    (["recipe=lora_32gpu", "generation.temperature=0"], "generation.temperature", "(0, 2]"),
    (["recipe=lora_32gpu", "generation.top_p=1.5"], "generation.top_p", "(0, 1]"),
    (["recipe=lora_32gpu", "algorithm.eps_clip_high=0.1"], "algorithm.eps_clip_high", "clip-higher"),
    (["recipe=lora_32gpu", "algorithm.overlong_buffer_len=9000"], "algorithm.overlong_buffer_len", "max_response_tokens"),
    (["recipe=mxfp8_64gpu", "algorithm.geo_mask_low=1.02"], "algorithm.geo_mask_low", "< 1 <"),
    (["recipe=lora_32gpu", "lora.rank=-1"], "lora.rank", "full-parameter"),
    (["recipe=lora_32gpu", "cluster.time_limit=tomorrow"], "cluster.time_limit", "HH:MM:SS"),
    (["recipe=lora_32gpu", "cluster.time_limit=00:04:00"], "cluster.signal_before_s", "before the time limit"),
    (["recipe=lora_32gpu", "cluster.grace_s=400"], "cluster.grace_s", "below cluster.signal_before_s"),
    (["recipe=lora_32gpu", "run_name=my/run"], "run_name", "letters"),
    (["recipe=lora_32gpu", "run_name=my run;rm -rf"], "run_name", "quote"),
    (["recipe=lora_32gpu", "paths.ckpt_path=relative/ckpts"], "paths.ckpt_path", "absolute"),
    (["recipe=lora_32gpu", "paths.ckpt_path=/o/x", "paths.export_path=/o/x/"], "paths.export_path", "differ"),
    (["recipe=mxfp8_64gpu", "trainer.rollout_nodes=8"], "trainer.rollout_nodes", "rollout_nodes < cluster.nodes"),
    (["recipe=lora_32gpu", "trainer.rollout_nodes=2"], "trainer.rollout_nodes", "colocated"),
    (["recipe=lora_32gpu", "trainer.backend=magic"], "trainer.backend", "rehearsal"),
    (["recipe=lora_32gpu", "container.runtime=docker"], "container.runtime", "pyxis"),
    (["recipe=lora_32gpu", "ray.dashboard_host=0.0.0.0", "ray.ports_per_job=8"], "ray.ports_per_job", "at least 32"),
]


@pytest.mark.parametrize("overrides,key,fix_words", BAD, ids=[b[1] + ":" + b[0][-1] for b in BAD])
def test_bad_setting_is_named_with_its_fix(overrides, key, fix_words):
    with pytest.raises(ConfigError) as err:
        load_config([*overrides, *PATHS])
    named = [p for p in err.value.problems if p.key == key]
    assert named, f"expected a problem on {key}, got {[str(p) for p in err.value.problems]}"
    assert fix_words in named[0].fix


def test_missing_required_paths_name_the_env_variable():
    with pytest.raises(ConfigError) as err:
        load_config(["recipe=lora_16gpu"])
    keys = {p.key: p.fix for p in err.value.problems}
    assert "MODEL_PATH" in keys["paths.model_path"] and "DATA_DIR" in keys["paths.data_dir"]
    assert "SKYRL_DIR" in keys["paths.skyrl_dir"]


def test_rehearsal_does_not_need_a_skyrl_checkout():
    cfg = load_config(["recipe=lora_16gpu", "trainer.backend=rehearsal", *PATHS[:2]])
    assert cfg.paths.skyrl_dir is None


def test_all_problems_reported_together():
    with pytest.raises(ConfigError) as err:
        load_config(["recipe=lora_32gpu", "precision=fp4", "generation.top_p=2", "checkpoint.interval=0", *PATHS])
    assert {"precision", "generation.top_p", "checkpoint.interval"} <= {p.key for p in err.value.problems}


def test_wrong_type_and_unknown_key_and_unknown_recipe():
    with pytest.raises(ConfigError) as err:
        load_config(["recipe=lora_32gpu", "cluster.nodes=four", *PATHS])
    assert err.value.problems[0].key == "cluster.nodes" and err.value.problems[0].value == "four"
    with pytest.raises(ConfigError) as err:
        load_config(["recipe=lora_32gpu", "megatron.tensor_paralel=4", *PATHS])
    assert err.value.problems[0].key == "megatron.tensor_paralel" and "tensor_parallel" in err.value.problems[0].fix
    with pytest.raises(ConfigError) as err:
        load_config(["recipe=lora_64gpu", *PATHS])
    assert err.value.problems[0].key == "recipe" and "lora_16gpu" in err.value.problems[0].fix


def test_bad_environment_value_is_named(monkeypatch):
    monkeypatch.setenv("MAX_TRAINING_STEPS", "fifty")
    with pytest.raises(ConfigError) as err:
        load_config(["recipe=lora_32gpu", *PATHS])
    assert err.value.problems[0].key == "max_training_steps"


def test_cli_exits_2_and_says_nothing_was_submitted():
    out = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "plan", "recipe=lora_16gpu", "megatron.tensor_parallel=3",
                          *PATHS], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "megatron.tensor_parallel" in out.stderr and "nothing was submitted" in out.stderr
    assert out.stdout == ""
