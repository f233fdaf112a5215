"""The four seed recipes reproduce every number the seed gives."""

import subprocess
import sys

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.config.skyrl_command import skyrl_launch, skyrl_overrides
from beam_slurm.verbs.plan import checkpoints_kept

PATHS = ["paths.model_path=/shared/models/beam", "paths.data_dir=/shared/data", "paths.skyrl_dir=/shared/SkyRL"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("MODEL_PATH", "DATA_DIR", "CKPT_PATH", "EXPORT_PATH", "SKYRL_DIR", "RESUME_MODE", "MAX_TRAINING_STEPS",
                "CKPT_INTERVAL", "OPTIMIZER_STATE_DISK_DIR", "KV_CACHE_DTYPE", "RUN_NAME", "BEAM_LOG_DIR",
                "BEAM_TRAINER_BACKEND", "BEAM_CONTAINER_IMAGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/home/alice")


def load(recipe, *extra):
    return load_config([f"recipe={recipe}", *PATHS, *extra])


def overrides_of(cfg):
    return dict(o.split("=", 1) for o in skyrl_overrides(cfg))


def test_common_settings_match_the_seed():
    for recipe in ("lora_16gpu", "lora_32gpu", "bf16_64gpu", "mxfp8_64gpu"):
        cfg = load(recipe)
        ov = overrides_of(cfg)
        assert cfg.max_training_steps == 50
        assert ov["trainer.max_training_steps"] == "50"
        assert ov["trainer.eval_interval"] == "5"
        assert ov["generator.eval_n_samples_per_prompt"] == "8"
        assert ov["generator.n_samples_per_prompt"] == "8"
        assert ov["trainer.max_prompt_length"] == "2048"
        assert '"max_generate_length":8192' in ov["generator.sampling_params"]
        assert '"temperature":1.0' in ov["generator.sampling_params"] and '"top_p":1.0' in ov["generator.sampling_params"]
        assert ov["generator.chat_template_kwargs"] == '{"reasoning_effort":"minimal"}'
        assert ov["trainer.algorithm.advantage_estimator"] == "grpo"
        assert float(ov["trainer.algorithm.eps_clip_high"]) > float(ov["trainer.algorithm.eps_clip_low"])  # clip-higher
        assert ov["trainer.algorithm.dynamic_sampling.type"] == "null"
        assert ov["generator.inference_engine.enable_return_routed_experts"] == "true"  # R3
        assert ov["trainer.policy.megatron_config.moe_enable_routing_replay"] == "true"
        assert "trainer.algorithm.overlong_buffer_len" in ov
        assert ov["data.val_data"] == '["/shared/data/aime-2025-cleaned.parquet","/shared/data/aime-2024-cleaned.parquet"]'
        assert ov["data.train_data"] == '["/shared/data/dapo-math-17k-cleaned.parquet"]'
        assert ov["trainer.ckpt_path"] == f"/home/alice/ckpts/{cfg.run_name}"
        assert ov["trainer.export_path"] == f"/home/alice/exports/{cfg.run_name}"


def test_lora_16gpu():
    cfg = load("lora_16gpu")
    assert (cfg.cluster.nodes, cfg.total_gpus) == (2, 16)
    assert (cfg.lora.rank, cfg.lora.alpha, cfg.lora.target_modules, cfg.learning_rate) == (64, 64, "all-linear", 1e-5)
    m = cfg.megatron
    assert (m.tensor_parallel, m.expert_parallel, m.pipeline_parallel) == (4, 8, 2)
    assert (cfg.num_engines, cfg.rollout.tensor_parallel, cfg.rollout.pipeline_parallel) == (1, 8, 2)
    assert (cfg.batch.prompts_per_step, cfg.batch.responses_per_prompt, cfg.batch.mini_batches) == (32, 8, 1)
    assert cfg.trainer.placement_colocated and cfg.checkpoint.interval == 10
    ov = overrides_of(cfg)
    assert ov["trainer.train_batch_size"] == ov["trainer.policy_mini_batch_size"] == "32"  # one update per step
    assert ov["trainer.placement.colocate_all"] == "true"
    assert ov["trainer.policy.megatron_config.lora_config.merge_lora"] == "false"  # adapters synced into vLLM slots
    env = skyrl_launch(cfg).env
    assert env["BEAM_LORA_PER_EXPERT_SLOTS"] == env["BEAM_LORA_PINNED_HOST_STAGING"] == env["BEAM_LORA_SP_REGATHER"] == "1"
    assert ov["trainer.fused_lm_head_logprob"] == "true"


def test_lora_32gpu_reference_run():
    cfg = load("lora_32gpu")
    assert (cfg.cluster.nodes, cfg.total_gpus, cfg.data_parallel) == (4, 32, 4)
    assert cfg.num_engines == 2  # derived: colocated GPUs match 2 x TP8 x PP2
    assert cfg.batch.mini_batches * cfg.max_training_steps == 100  # 100 optimizer updates over 50 steps
    ov = overrides_of(cfg)
    assert (ov["trainer.train_batch_size"], ov["trainer.policy_mini_batch_size"]) == ("64", "32")
    assert ov["generator.inference_engine.num_engines"] == "2"
    assert ov["trainer.ckpt_interval"] == "10"


def test_bf16_64gpu_full_finetune():
    cfg = load("bf16_64gpu")
    assert (cfg.cluster.nodes, cfg.total_gpus, cfg.is_lora, cfg.precision) == (8, 64, False, "bf16")
    assert cfg.trainer.placement_colocated and cfg.num_engines == 4
    assert cfg.checkpoint.interval == 25 and cfg.checkpoint.resume_mode == "latest"
    assert cfg.paths.optimizer_state_disk_dir == "/scratch/optimizer_state"
    ov = overrides_of(cfg)
    assert "trainer.policy.model.lora.rank" not in ov
    assert ov["trainer.policy.megatron_config.optimizer_config_kwargs.optimizer_cpu_offload"] == "true"
    assert ov["trainer.policy.megatron_config.optimizer_config_kwargs.optimizer_offload_fraction"] == "1.0"
    assert skyrl_launch(cfg).env["OPTIMIZER_STATE_DISK_DIR"] == "/scratch/optimizer_state"
    assert checkpoints_kept(cfg) == 2


def test_bf16_empty_optimizer_dir_means_cpu_optimizer(monkeypatch):
    monkeypatch.setenv("OPTIMIZER_STATE_DISK_DIR", "")
    cfg = load("bf16_64gpu")
    assert cfg.paths.optimizer_state_disk_dir == ""
    assert skyrl_launch(cfg).env["OPTIMIZER_STATE_DISK_DIR"] == ""
    assert "OPTIMIZER_STATE_DISK_DIR" not in skyrl_launch(load("lora_32gpu")).env


def test_mxfp8_64gpu():
    cfg = load("mxfp8_64gpu")
    assert (cfg.total_gpus, cfg.precision, cfg.rollout.quantization) == (64, "mxfp8", "mxfp8")
    assert not cfg.trainer.placement_colocated
    assert cfg.training_gpus + cfg.rollout_gpus == 64
    assert cfg.rollout.kv_cache_dtype == "auto"  # BF16 KV cache by default
    ov = overrides_of(cfg)
    assert ov["trainer.placement.colocate_all"] == "false"
    assert ov["trainer.algorithm.off_policy_correction.sequence_mask_metric"] == "geometric"
    assert (ov["trainer.algorithm.off_policy_correction.geo_mask_low"],
            ov["trainer.algorithm.off_policy_correction.geo_mask_high"]) == ("0.99", "1.01")
    assert ov["generator.inference_engine.engine_init_kwargs.quantization"] == "mxfp8"
    assert "generator.inference_engine.engine_init_kwargs.kv_cache_dtype" not in ov
    assert "VLLM_FLASH_ATTN_VERSION" not in skyrl_launch(cfg).env
    assert ov["trainer.policy.megatron_config.transformer_config_kwargs.fp8_recipe"] == "mxfp8"
    assert "trainer.policy.megatron_config.transformer_config_kwargs.fp8_recipe" not in overrides_of(load("bf16_64gpu"))


def test_mxfp8_options(monkeypatch):
    monkeypatch.setenv("KV_CACHE_DTYPE", "fp8_e4m3")
    cfg = load("mxfp8_64gpu", "rollout.attention=fa2")
    ov = overrides_of(cfg)
    assert ov["generator.inference_engine.engine_init_kwargs.kv_cache_dtype"] == "fp8_e4m3"
    assert skyrl_launch(cfg).env["VLLM_FLASH_ATTN_VERSION"] == "2"


def test_seed_environment_variables_are_honoured(monkeypatch):
    monkeypatch.setenv("MODEL_PATH", "/m")
    monkeypatch.setenv("DATA_DIR", "/d")
    monkeypatch.setenv("SKYRL_DIR", "/s")
    monkeypatch.setenv("CKPT_PATH", "/ck")
    monkeypatch.setenv("EXPORT_PATH", "/ex")
    monkeypatch.setenv("MAX_TRAINING_STEPS", "7")
    monkeypatch.setenv("CKPT_INTERVAL", "3")
    monkeypatch.setenv("RESUME_MODE", "latest")
    cfg = load_config(["recipe=lora_16gpu"])
    ov = overrides_of(cfg)
    assert (ov["trainer.policy.model.path"], ov["trainer.ckpt_path"], ov["trainer.export_path"]) == ("/m", "/ck", "/ex")
    assert (ov["trainer.max_training_steps"], ov["trainer.ckpt_interval"], ov["trainer.resume_mode"]) == ("7", "3", "latest")
    # an explicit override beats the environment
    assert load_config(["recipe=lora_16gpu", "max_training_steps=9"]).max_training_steps == 9


def test_resume_from_path_passes_the_path():
    cfg = load("lora_32gpu", "checkpoint.resume_mode=from_path", "checkpoint.resume_path=/ck/global_step_20")
    assert overrides_of(cfg)["trainer.resume_path"] == "/ck/global_step_20"


def test_rehearsal_backend_runs_our_trainer_module():
    launch = skyrl_launch(load("lora_16gpu", "trainer.backend=rehearsal"))
    assert launch.module == "beam_slurm.jobs.training.rehearsal" and launch.cwd is None
    real = skyrl_launch(load("lora_16gpu"))
    assert real.module == "beam_slurm.jobs.training.entrypoint" and real.cwd == "/shared/SkyRL"
    assert real.overrides == launch.overrides


def test_plan_cli_prints_table_and_overrides(tmp_path):
    from job_inputs import make_job_inputs, path_overrides

    env_args = [sys.executable, "-m", "beam_slurm.cli", "plan", "recipe=lora_32gpu",
                *path_overrides(make_job_inputs(tmp_path))]
    table = subprocess.run(env_args, capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    for text in ("4 x 8 = 32 GPUs", "TP4 PP2 CP1 EP8", "2 x (TP8 x PP2)", "64 x 8 = 512", "100 over 50 steps",
                 "python -m beam_slurm.jobs.training.entrypoint"):
        assert text in table.stdout, text
    lines = subprocess.run([*env_args, "--skyrl-overrides"], capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert lines and all("=" in line and not line.startswith(" ") for line in lines)
    assert "trainer.train_batch_size=64" in lines
