"""Turn a resolved recipe into the exact SkyRL launch: module, `key=value` overrides, environment.

Keys follow SkyRL 0.3.0's config dataclasses; the two overlong-penalty keys exist only in the DAPO example's config
subclass (DAPO_ONLY_KEYS). Values are rendered so that OmegaConf's CLI parser reads back exactly what we meant.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from beam_slurm.config.env_manifest import masked
from beam_slurm.config.overrides import escape_interpolation, escape_values, scalar_text

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig

DAPO_MODULE = "examples.train.algorithms.dapo.main_dapo"  # in the SkyRL checkout (examples/ is not in the wheel)
ENTRYPOINT_MODULE = "beam_slurm.jobs.training.entrypoint"
REHEARSAL_MODULE = "beam_slurm.jobs.training.rehearsal"
DAPO_ONLY_KEYS = ("trainer.algorithm.overlong_buffer_len", "trainer.algorithm.overlong_buffer_penalty_factor")

# The rehearsal's costs travel as environment (SkyRL's parser would refuse unknown keys):
# RehearsalSettings field -> (environment variable, recipe key, type).
COST_ENV = {
    "step_s": ("BEAM_REHEARSAL_STEP_SECONDS", "trainer.rehearsal_step_s", float),
    "save_s": ("BEAM_REHEARSAL_SAVE_SECONDS", "trainer.rehearsal_save_s", float),
    "save_bytes": ("BEAM_REHEARSAL_SAVE_BYTES", "trainer.rehearsal_save_bytes", int),
    "model_load_s": ("BEAM_REHEARSAL_MODEL_LOAD_SECONDS", "trainer.rehearsal_model_load_s", float),
    "hang_at_step": ("BEAM_REHEARSAL_HANG_AT_STEP", "trainer.rehearsal_hang_at_step", int),
}


@dataclass
class SkyRLLaunch:
    """What the driver runs on the head node."""

    module: str  # run with `python -m` from `cwd`
    overrides: list[str]  # `key=value`, later ones win
    env: dict[str, str] = field(default_factory=dict)  # no secrets: tokens travel as files
    cwd: str | None = None  # the SkyRL checkout, so `examples.*` imports resolve

    def argv(self, python: str = "python") -> list[str]:
        return [python, "-m", self.module, *self.overrides]

    def shell(self, python: str = "python") -> str:
        """One shell line for display, every value quoted; a secret's value shows as `<set>`."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(masked(self.env).items()))
        cd = f"cd {shlex.quote(self.cwd)} && " if self.cwd else ""
        return f"{cd}{env + ' ' if env else ''}{shlex.join(self.argv(python))}"


def render_value(value: object) -> str:
    """Render a Python value so OmegaConf.from_cli (SkyRL's parser) reads it back to the same value."""
    scalar = scalar_text(value)
    if scalar is not None:
        return scalar
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(escape_values(value), separators=(",", ":"))
    text = escape_interpolation(str(value))
    return text if "\n" not in text and _parses_to(text, str(value)) else json.dumps(text)


def _parses_to(rendered: str, value: object) -> bool:
    """True when OmegaConf's CLI parser, resolving references as SkyRL does, reads `rendered` back as `value`."""
    try:
        parsed: Any = OmegaConf.to_container(OmegaConf.from_cli([f"k={rendered}"]), resolve=True)
        return bool(parsed["k"] == value)
    except (OmegaConfBaseException, yaml.YAMLError, ValueError, TypeError):  # YAML refuses a tab, for one
        return False


def reads_back(value: object) -> bool:
    """True when `render_value(value)` parses back to `value` exactly (tuples compare as lists)."""
    return _parses_to(render_value(value), list(value) if isinstance(value, tuple) else value)


def _under(prefix: str, **values: object) -> list[tuple[str, object]]:
    return [(f"{prefix}.{key}", value) for key, value in values.items()]


def skyrl_settings(cfg: BeamConfig) -> list[tuple[str, object]]:
    """The recipe as ordered (SkyRL key, value) pairs: the single mapping from our schema to SkyRL's."""
    p, g, a, b, m, r = cfg.paths, cfg.generation, cfg.algorithm, cfg.batch, cfg.megatron, cfg.rollout
    data_dir = (p.data_dir or "").rstrip("/")
    sampling = {"max_generate_length": g.max_response_tokens, "temperature": g.temperature, "top_p": g.top_p}
    megatron = "trainer.policy.megatron_config"
    kv = [
        ("data.train_data", [f"{data_dir}/{p.train_file}"]),
        ("data.val_data", [f"{data_dir}/{f}" for f in p.eval_files]),
        ("environment.env_class", "aime"),
        *_under(
            "trainer.algorithm",
            advantage_estimator=a.advantage_estimator,
            eps_clip_low=a.eps_clip_low,
            eps_clip_high=a.eps_clip_high,
            loss_reduction=a.loss_reduction,
            use_kl_loss=a.use_kl_loss,
            **{"dynamic_sampling.type": "filter" if a.dynamic_sampling else None},
            overlong_buffer_len=a.overlong_buffer_len,
            overlong_buffer_penalty_factor=a.overlong_penalty_factor,
        ),
    ]
    if a.geo_mask:
        kv += _under(
            "trainer.algorithm.off_policy_correction",
            sequence_mask_metric="geometric",
            geo_mask_low=a.geo_mask_low,
            geo_mask_high=a.geo_mask_high,
        )
    kv += [
        ("trainer.strategy", "megatron"),
        ("trainer.policy.model.path", p.model_path),
        ("trainer.policy.optimizer_config.lr", cfg.learning_rate),
        *_under(
            megatron,
            tensor_model_parallel_size=m.tensor_parallel,
            pipeline_model_parallel_size=m.pipeline_parallel,
            context_parallel_size=m.context_parallel,
            expert_model_parallel_size=m.expert_parallel,
            expert_tensor_parallel_size=m.expert_tensor_parallel,
            moe_enable_routing_replay=r.routing_replay,
        ),
    ]
    if cfg.is_lora:
        kv += _under(
            "trainer.policy.model.lora",
            rank=cfg.lora.rank,
            alpha=cfg.lora.alpha,
            target_modules=cfg.lora.target_modules,
        )
        # Adapters stay separate and are synced into vLLM's adapter slots (SkyRL merges them by default).
        kv.append((f"{megatron}.lora_config.merge_lora", not cfg.lora.per_expert_slots))
    else:
        # The optimizer lives off the GPU either way: in host RAM, or streamed to OPTIMIZER_STATE_DISK_DIR (env).
        kv += _under(f"{megatron}.optimizer_config_kwargs", optimizer_cpu_offload=True, optimizer_offload_fraction=1.0)
    if cfg.precision == "mxfp8":
        # Megatron's MXFP8 recipe covers the linear layers of attention and MLP; router and norms keep their precision.
        kv += _under(f"{megatron}.transformer_config_kwargs", fp8="e4m3", fp8_recipe="mxfp8")
    kv += _under(
        "trainer.placement",
        colocate_all=cfg.trainer.placement_colocated,
        policy_num_nodes=cfg.training_nodes,
        policy_num_gpus_per_node=cfg.cluster.gpus_per_node,
    )
    kv += _under(
        "trainer",
        train_batch_size=b.prompts_per_step,
        policy_mini_batch_size=cfg.mini_batch_prompts,
        micro_train_batch_size_per_gpu=m.micro_batch_size,
        micro_forward_batch_size_per_gpu=m.micro_batch_size,
        max_prompt_length=g.max_prompt_tokens,
        max_training_steps=cfg.max_training_steps,
        seed=cfg.seed,
        fused_lm_head_logprob=a.fused_lm_head_logprob,
        eval_interval=cfg.eval.interval if cfg.eval.in_training else -1,
        eval_before_train=cfg.eval.before_train and cfg.eval.in_training,
        ckpt_interval=cfg.checkpoint.interval,
        hf_save_interval=cfg.checkpoint.hf_save_interval,
        max_ckpts_to_keep=cfg.checkpoint.max_to_keep,
        resume_mode=cfg.checkpoint.resume_mode,
    )
    if cfg.checkpoint.resume_mode == "from_path":
        kv.append(("trainer.resume_path", cfg.checkpoint.resume_path))
    if cfg.trainer.tags:
        kv.append(("trainer.tags", list(cfg.trainer.tags)))
    kv += _under(
        "trainer",
        ckpt_path=p.ckpt_path,
        export_path=p.export_path,
        run_name=cfg.run_name,
        logger=cfg.trainer.logger,
        project_name=cfg.trainer.project_name,
        log_path=f"{p.log_dir}/skyrl",
    )
    kv += _under(
        "generator",
        n_samples_per_prompt=b.responses_per_prompt,
        eval_n_samples_per_prompt=cfg.eval.responses_per_problem,
        sampling_params=sampling,
        eval_sampling_params=sampling,
        chat_template_kwargs={"reasoning_effort": g.reasoning_effort},
    )
    kv += _under(
        "generator.inference_engine",
        num_engines=cfg.num_engines,
        tensor_parallel_size=r.tensor_parallel,
        pipeline_parallel_size=r.pipeline_parallel,
        gpu_memory_utilization=r.gpu_memory_utilization,
        distributed_executor_backend=cfg.executor_backend,
        enable_return_routed_experts=r.routing_replay,
    )
    if r.kv_cache_dtype != "auto":
        kv.append(("generator.inference_engine.engine_init_kwargs.kv_cache_dtype", r.kv_cache_dtype))
    if r.quantization:
        kv.append(("generator.inference_engine.engine_init_kwargs.quantization", r.quantization))
    return kv


def skyrl_overrides(cfg: BeamConfig) -> list[str]:
    """The `key=value` list passed to SkyRL, extra overrides last so they win."""
    return [f"{k}={render_value(v)}" for k, v in skyrl_settings(cfg)] + list(cfg.trainer.extra_overrides)


def skyrl_env(cfg: BeamConfig) -> dict[str, str]:
    """Environment the driver and Ray workers need for this recipe."""
    env = {
        # SkyRL waits this long for its placement groups; 64-GPU bundles on a busy cluster take a while.
        "SKYRL_RAY_PG_TIMEOUT_IN_S": "600",
        "MAX_TRAINING_STEPS": str(cfg.max_training_steps),
        "CKPT_PATH": cfg.paths.ckpt_path or "",
        "EXPORT_PATH": cfg.paths.export_path or "",
        "RESUME_MODE": cfg.checkpoint.resume_mode,
        "CKPT_INTERVAL": str(cfg.checkpoint.interval),
        "KV_CACHE_DTYPE": cfg.rollout.kv_cache_dtype,
    }
    if not cfg.is_lora:
        env["OPTIMIZER_STATE_DISK_DIR"] = cfg.paths.optimizer_state_disk_dir or ""
    else:
        # The seed's LoRA extras have no SkyRL 0.3.0 key; the Beam branch of SkyRL reads them from its launch scripts'
        # environment. They are passed the same way so the settings stay visible and overridable here.
        env["BEAM_LORA_PER_EXPERT_SLOTS"] = "1" if cfg.lora.per_expert_slots else "0"
        env["BEAM_LORA_PINNED_HOST_STAGING"] = "1" if cfg.lora.pinned_host_staging else "0"
        env["BEAM_LORA_SP_REGATHER"] = "1" if cfg.lora.sequence_parallel_regather else "0"
    if cfg.rollout.attention == "fa2":
        env["VLLM_FLASH_ATTN_VERSION"] = "2"
    if cfg.trainer.logger == "wandb":
        # Offline runs ignore resume; the job adds WANDB_RUN_ID and WANDB_DIR per attempt
        # (beam_slurm.jobs.training.tracking).
        env.update(
            {"WANDB_MODE": cfg.trainer.wandb_mode, "WANDB_RESUME": "allow", "WANDB_PROJECT": cfg.trainer.project_name}
        )
        # SkyRL 0.3.0 has no group key: wandb.init reads the group from the environment.
        env.update({"WANDB_RUN_GROUP": cfg.trainer.wandb_group} if cfg.trainer.wandb_group else {})
        env.update({"WANDB_TAGS": ",".join(cfg.trainer.tags)} if cfg.trainer.tags else {})
    env.update({k: str(v) for k, v in cfg.trainer.extra_env.items()})
    return env


def skyrl_launch(cfg: BeamConfig) -> SkyRLLaunch:
    """The driver command for the configured trainer backend."""
    if cfg.trainer.backend == "rehearsal":
        costs = {env: str(getattr(cfg.trainer, key.split(".")[1])) for env, key, _ in COST_ENV.values()}
        env = {**skyrl_env(cfg), **costs}
        return SkyRLLaunch(REHEARSAL_MODULE, skyrl_overrides(cfg), env, cwd=None)
    return SkyRLLaunch(ENTRYPOINT_MODULE, skyrl_overrides(cfg), skyrl_env(cfg), cwd=cfg.paths.skyrl_dir)
