"""Every check that can fail before a GPU is held: parallelism, batch arithmetic, ranges, paths, combinations.

Each problem names the key, the value and the fix; `validate_config` raises one ConfigError with all of them. The batch
rules mirror the ones SkyRL enforces at start-up, so a bad recipe fails here in a second instead of after an allocation
of 64 GPUs came up."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import re
import socket
import typing
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from beam_slurm.config.choices import (
    Attention,
    ExecutorBackend,
    KvCacheDtype,
    Precision,
    Quantization,
    RecipeBackend,
    ResumeMode,
    WandbMode,
)
from beam_slurm.config.container_runtime import validate as container_problems
from beam_slurm.config.env_manifest import problems as env_manifest_problems
from beam_slurm.config.overrides import value_at
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.skyrl_command import DAPO_MODULE, reads_back
from beam_slurm.config.sources import env_sources
from beam_slurm.core.errors import ConfigError, ConfigProblem
from beam_slurm.slurm import values

RECIPE_BACKENDS = typing.get_args(RecipeBackend)
PRECISIONS = typing.get_args(Precision)
KV_CACHE_DTYPES = typing.get_args(KvCacheDtype)
ATTENTION = typing.get_args(Attention)
RESUME_MODES = typing.get_args(ResumeMode)
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Settings that name files or folders (a list or a mapping: each value), and names that end up in paths and job names
PATH_KEYS = (
    "paths.model_path",
    "paths.data_dir",
    "paths.ckpt_path",
    "paths.export_path",
    "paths.skyrl_dir",
    "paths.log_dir",
    "paths.optimizer_state_disk_dir",
    "paths.train_file",
    "paths.eval_files",
    "checkpoint.resume_path",
    "data.out_dir",
    "container.image_cache_dir",
    "ray.state_dir",
    "ray.temp_dir_root",
    "trainer.env_secret_files",
)
NAME_KEYS = ("run_name", "eval.launcher.name")
NAME_MAX, PATH_MAX = 255, 4095  # bytes per folder or file name and per path on Linux file systems (ENAMETOOLONG)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_NAMES = {"\t": "a tab", "\n": "a newline", "\r": "a carriage return"}
# Remembered per text: each answer parses it with OmegaConf (~1 ms), and a sweep's points share almost every text.
_reads_back = functools.lru_cache(maxsize=None)(reads_back)
# sbatch options that a recipe key renders: `cluster.extra_sbatch_args` may not set them a second time
FIRST_CLASS_SBATCH_OPTIONS = {
    "--time": "cluster.time_limit",
    "-t": "cluster.time_limit",
    "--nodes": "cluster.nodes",
    "-N": "cluster.nodes",
    "--partition": "cluster.partition",
    "-p": "cluster.partition",
    "--account": "cluster.account",
    "-A": "cluster.account",
    "--qos": "cluster.qos",
    "-q": "cluster.qos",
    "--signal": "cluster.signal_before_s",
    "--constraint": "cluster.constraint",
    "-C": "cluster.constraint",
    "--mem": "cluster.mem_per_node",
    "--gpus-per-node": "cluster.gpus_per_node",
    "--cpus-per-task": "cluster.cpus_per_node",
    "-c": "cluster.cpus_per_node",
    "--job-name": "run_name",
    "-J": "run_name",
    "--output": "paths.log_dir",
    "-o": "paths.log_dir",
}


def problems(cfg: BeamConfig) -> list[ConfigProblem]:
    """All problems of a typed, default-filled BeamConfig (empty list = valid)."""
    unusable = unusable_text_problems(cfg)
    if unusable:  # the checks below read these paths and parse these texts: report them alone
        return unusable
    out: list[ConfigProblem] = []

    def bad(key: str, value: object, fix: str) -> None:
        out.append(ConfigProblem(key, value, fix))

    for key, choices in (("precision", PRECISIONS), ("trainer.backend", RECIPE_BACKENDS)):
        if value_at(cfg, key) not in choices:
            bad(key, value_at(cfg, key), f"use one of {', '.join(choices)}")
    if not _RUN_NAME.fullmatch(cfg.run_name or ""):
        bad("run_name", cfg.run_name, "use letters, digits, '.', '_' or '-' (it names folders and the Slurm job)")
    if cfg.rollout.kv_cache_dtype not in KV_CACHE_DTYPES:
        bad(
            "rollout.kv_cache_dtype",
            cfg.rollout.kv_cache_dtype,
            f"use one of {', '.join(KV_CACHE_DTYPES)} (env KV_CACHE_DTYPE)",
        )
    if cfg.rollout.attention not in ATTENTION:
        bad("rollout.attention", cfg.rollout.attention, "use fa4 (Flash Attention 4) or fa2 (Flash Attention 2)")
    if cfg.rollout.executor_backend not in typing.get_args(ExecutorBackend):
        bad(
            "rollout.executor_backend",
            cfg.rollout.executor_backend,
            "use auto, ray (replicas spanning nodes) or mp (replicas within one node)",
        )
    elif cfg.rollout.executor_backend == "mp" and cfg.gpus_per_engine > max(cfg.cluster.gpus_per_node, 1):
        bad(
            "rollout.executor_backend",
            "mp",
            f"a TP x PP = {cfg.gpus_per_engine} replica spans nodes: use ray, or make "
            f"TP x PP <= {cfg.cluster.gpus_per_node}",
        )
    if cfg.checkpoint.resume_mode not in RESUME_MODES:
        bad(
            "checkpoint.resume_mode",
            cfg.checkpoint.resume_mode,
            f"use one of {', '.join(RESUME_MODES)} (env RESUME_MODE)",
        )

    for key in (
        "cluster.nodes",
        "cluster.gpus_per_node",
        "max_training_steps",
        "checkpoint.interval",
        "eval.interval",
        "eval.responses_per_problem",
        "batch.prompts_per_step",
        "batch.mini_batches",
        "megatron.tensor_parallel",
        "megatron.pipeline_parallel",
        "megatron.context_parallel",
        "megatron.expert_parallel",
        "megatron.expert_tensor_parallel",
        "megatron.micro_batch_size",
        "rollout.tensor_parallel",
        "rollout.pipeline_parallel",
        "generation.max_prompt_tokens",
        "generation.max_response_tokens",
    ):
        value = value_at(cfg, key)
        if not isinstance(value, int) or value < 1:
            bad(key, value, "must be a positive integer")
    if cfg.batch.responses_per_prompt < 2:
        bad(
            "batch.responses_per_prompt",
            cfg.batch.responses_per_prompt,
            "GRPO compares responses within a group: use at least 2 (seed: 8)",
        )
    if cfg.lora.rank < 0:
        bad("lora.rank", cfg.lora.rank, "use 0 for full-parameter training or a positive rank (seed: 64)")
    if cfg.lora.rank > 0 and cfg.lora.alpha <= 0:
        bad("lora.alpha", cfg.lora.alpha, "must be positive when LoRA is on (seed: alpha = rank = 64)")
    if not 0 < cfg.generation.temperature <= 2:
        bad("generation.temperature", cfg.generation.temperature, "use a value in (0, 2] (seed: 1.0)")
    if not 0 < cfg.generation.top_p <= 1:
        bad("generation.top_p", cfg.generation.top_p, "use a value in (0, 1] (seed: 1.0)")
    if not 0 < cfg.rollout.gpu_memory_utilization <= 1:
        bad("rollout.gpu_memory_utilization", cfg.rollout.gpu_memory_utilization, "use a fraction in (0, 1]")
    if cfg.algorithm.eps_clip_low <= 0 or cfg.algorithm.eps_clip_high < cfg.algorithm.eps_clip_low:
        bad(
            "algorithm.eps_clip_high",
            cfg.algorithm.eps_clip_high,
            f"clip-higher needs 0 < eps_clip_low ({cfg.algorithm.eps_clip_low}) <= eps_clip_high (DAPO: 0.2 / 0.28)",
        )
    if not 0 <= cfg.algorithm.overlong_buffer_len < cfg.generation.max_response_tokens:
        bad(
            "algorithm.overlong_buffer_len",
            cfg.algorithm.overlong_buffer_len,
            f"the penalty ramp must fit inside generation.max_response_tokens ({cfg.generation.max_response_tokens})",
        )
    if cfg.algorithm.geo_mask and not cfg.algorithm.geo_mask_low < 1.0 < cfg.algorithm.geo_mask_high:
        bad(
            "algorithm.geo_mask_low",
            [cfg.algorithm.geo_mask_low, cfg.algorithm.geo_mask_high],
            "geometric masking needs geo_mask_low < 1 < geo_mask_high (seed: 0.99, 1.01)",
        )
    if cfg.algorithm.lr is not None and not 0 < cfg.algorithm.lr < 1:
        bad("algorithm.lr", cfg.algorithm.lr, "use a learning rate in (0, 1) (seed LoRA: 1e-5)")
    sizes_ok = not out
    if cfg.eval.chain_poll_s <= 0 or cfg.eval.chain_settle_s < 0:
        bad(
            "eval.chain_poll_s",
            [cfg.eval.chain_poll_s, cfg.eval.chain_settle_s],
            "use a positive poll interval and a settle time >= 0 (seconds)",
        )
    for key, fix in (
        ("max_requeues", "use 0 (never requeue) or more"),
        ("spare_nodes", "use 0 (none) or more"),
        ("max_in_job_attempts", "use 0 (none) or more"),
        ("max_attempts_without_progress", "use 0 (no guard) or a number of attempts"),
    ):
        if getattr(cfg.cluster, key) < 0:
            bad(f"cluster.{key}", getattr(cfg.cluster, key), fix)

    try:
        limit = values.time_limit_seconds(str(cfg.cluster.time_limit))  # None reads as "None": refused, as before
    except values.SlurmValueError:
        bad("cluster.time_limit", cfg.cluster.time_limit, f"use what sbatch --time takes: {values.TIME_FORMS}")
    else:
        if limit is not None and cfg.cluster.signal_before_s >= limit:
            bad(
                "cluster.signal_before_s",
                cfg.cluster.signal_before_s,
                f"the notice must come before the time limit ({cfg.cluster.time_limit} = "
                f"{values.describe_seconds(limit)}): lower it or raise cluster.time_limit",
            )
    if cfg.cluster.mem_per_node not in (None, ""):
        try:
            values.memory_megabytes(cfg.cluster.mem_per_node)
        except values.SlurmValueError as exc:
            bad("cluster.mem_per_node", cfg.cluster.mem_per_node, str(exc).split("; ", 1)[1])
    for arg in cfg.cluster.extra_sbatch_args:
        option = str(arg).split("=", 1)[0]
        owner = FIRST_CLASS_SBATCH_OPTIONS.get(option) or next(
            (
                key
                for flag, key in FIRST_CLASS_SBATCH_OPTIONS.items()
                if len(flag) == 2 and option.startswith(flag) and option != flag and not option.startswith("--")
            ),
            None,
        )
        if owner:
            bad(
                "cluster.extra_sbatch_args",
                arg,
                f"{option} is set by {owner}: set that key instead (the job would "
                "get both values, and the plan would check only one)",
            )
    if cfg.cluster.partition:
        try:
            values.partition_names(cfg.cluster.partition)
        except values.SlurmValueError:
            bad("cluster.partition", cfg.cluster.partition, "use a partition name or a comma-separated list of them")
    for key, value in (
        ("cluster.hang_timeout_s", cfg.cluster.hang_timeout_s),
        ("eval.hang_timeout_s", cfg.eval.hang_timeout_s),
    ):
        if value is not None and value < 0:
            bad(key, value, "use seconds > 0, 0 to turn the hang watchdog off, or leave it unset to derive it")
    if cfg.cluster.stop_grace_s < 1:
        bad("cluster.stop_grace_s", cfg.cluster.stop_grace_s, "give Ray at least 1 s to stop")
    elif not 0 < cfg.cluster.grace_s < cfg.cluster.signal_before_s - cfg.cluster.stop_grace_s:
        bad(
            "cluster.grace_s",
            cfg.cluster.grace_s,
            f"must be positive and below cluster.signal_before_s ({cfg.cluster.signal_before_s}) minus "
            f"cluster.stop_grace_s ({cfg.cluster.stop_grace_s}), so the job requeues before its time limit",
        )
    if cfg.trainer.wandb_mode not in typing.get_args(WandbMode):
        bad("trainer.wandb_mode", cfg.trainer.wandb_mode, "use offline, online or disabled")
    if not cfg.trainer.project_name.strip() or len(cfg.trainer.project_name) > 128:
        bad("trainer.project_name", cfg.trainer.project_name, "use a project name of 1 to 128 characters")
    if len(cfg.trainer.wandb_group) > 128:
        bad("trainer.wandb_group", cfg.trainer.wandb_group, "use a group name of at most 128 characters")
    for tag in cfg.trainer.tags:  # W&B's limit; WANDB_TAGS is comma-separated
        if not tag.strip() or len(tag) > 64 or "," in tag:
            bad("trainer.tags", list(cfg.trainer.tags), f"tag {tag!r}: use 1 to 64 characters without a comma")
    if cfg.cluster.fabric_check_timeout_s <= 0:
        bad("cluster.fabric_check_timeout_s", cfg.cluster.fabric_check_timeout_s, "use a positive number of seconds")
    if cfg.cluster.fabric_check_bytes < 4:
        bad("cluster.fabric_check_bytes", cfg.cluster.fabric_check_bytes, "use at least 4 bytes, e.g. 67108864")

    # --- parallelism and batch arithmetic (the layout: what cluster.nodes scales) ---------------------------
    layout = layout_problems(cfg, sizes_ok=sizes_ok)
    if layout and sizes_ok:
        hint = scaled_layout_hint(cfg)
        layout = [
            dataclasses.replace(p, fix=f"{p.fix}; {hint}") if hint and p.key != "trainer.rollout_nodes" else p
            for p in layout
        ]
    out.extend(layout)

    if cfg.precision == "mxfp8" and cfg.is_lora:
        bad("precision", cfg.precision, "MXFP8 is a full-parameter recipe: set lora.rank=0 or precision=bf16")
    if cfg.rollout.quantization not in (None, *typing.get_args(Quantization)):
        bad("rollout.quantization", cfg.rollout.quantization, "use mxfp8, fp8 or leave empty (follows precision)")
    if cfg.checkpoint.resume_mode == "from_path":
        rp = cfg.checkpoint.resume_path
        if not rp or not re.search(r"global_step_\d+/?$", rp):
            bad(
                "checkpoint.resume_path",
                rp,
                "resume_mode=from_path needs checkpoint.resume_path=<ckpt_path>/global_step_N (SkyRL's folder name)",
            )
    elif cfg.checkpoint.resume_path:
        bad("checkpoint.resume_path", cfg.checkpoint.resume_path, "is only read with checkpoint.resume_mode=from_path")

    needed = {
        "paths.model_path": ("MODEL_PATH", cfg.paths.model_path),
        "paths.data_dir": ("DATA_DIR", cfg.paths.data_dir),
    }
    if cfg.trainer.backend == "skyrl":
        needed["paths.skyrl_dir"] = ("SKYRL_DIR", cfg.paths.skyrl_dir)
    for key, (env, value) in needed.items():
        if not value:
            bad(key, value, f"is required: export {env}=/shared/path or pass {key}=/shared/path")
    for key in (
        "model_path",
        "data_dir",
        "ckpt_path",
        "export_path",
        "skyrl_dir",
        "log_dir",
        "optimizer_state_disk_dir",
    ):
        value = getattr(cfg.paths, key)
        if value and not value.startswith("/"):
            bad(f"paths.{key}", value, "use an absolute path: every node must see the same path")
    if (
        cfg.paths.ckpt_path
        and cfg.paths.export_path
        and cfg.paths.ckpt_path.rstrip("/") == cfg.paths.export_path.rstrip("/")
    ):
        bad(
            "paths.export_path",
            cfg.paths.export_path,
            "must differ from paths.ckpt_path (exports would mix with checkpoints)",
        )

    out.extend(container_problems(cfg.container))
    out.extend(cfg.ray.problems())
    out.extend(env_manifest_problems(cfg))
    if cfg.cluster.log_copy_interval_s < 0 or cfg.cluster.log_copy_max_mbytes <= 0:
        bad(
            "cluster.log_copy_interval_s/log_copy_max_mbytes",
            (cfg.cluster.log_copy_interval_s, cfg.cluster.log_copy_max_mbytes),
            "use an interval >= 0 seconds (0: copy at the end only) and a bound > 0 MiB",
        )
    out.extend(skyrl_value_problems(cfg))
    out.extend(budget_problems(cfg))
    return _named(cfg, out)


def _named(cfg: BeamConfig, found: list[ConfigProblem]) -> list[ConfigProblem]:
    """Each problem naming the environment variable its key was read from."""
    sources = env_sources(cfg)
    return [problem.from_env(sources) for problem in found]


def unusable_text_problems(cfg: BeamConfig) -> list[ConfigProblem]:
    """Paths and names the file system or the batch scripts would refuse: control characters (a tab, a newline),
    a folder or file name over NAME_MAX bytes, a path over PATH_MAX bytes."""
    out: list[ConfigProblem] = []
    too_long: set[str] = set()  # a name reported once, not again in the paths derived from it (log_dir, ...)
    for key in PATH_KEYS + NAME_KEYS:
        value = value_at(cfg, key)
        texts = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        for text in (t for t in texts if isinstance(t, str)):
            control = _CONTROL.search(text)
            if control:
                what = _CONTROL_NAMES.get(control.group(), f"the control character {control.group()!r}")
                out.append(
                    ConfigProblem(
                        key,
                        problem=f"{text!r} holds {what}",
                        fix="remove it: a tab or newline "
                        "in a path or name breaks the batch scripts and the saved config",
                    )
                )
            elif key in PATH_KEYS and len(text.encode()) > PATH_MAX:
                out.append(
                    ConfigProblem(
                        key,
                        problem=f"the path is {len(text.encode())} bytes long, over the "
                        f"{PATH_MAX} the file system takes (ENAMETOOLONG)",
                        fix="use a shorter path",
                    )
                )
            elif key in PATH_KEYS:
                long = next((part for part in text.split("/") if len(part.encode()) > NAME_MAX), None)
                if long is not None and long not in too_long:
                    too_long.add(long)
                    out.append(
                        ConfigProblem(
                            key,
                            problem=f"the name {long[:40]!r}... is {len(long.encode())} "
                            f"bytes long, over the {NAME_MAX} a file system takes (ENAMETOOLONG)",
                            fix="shorten that folder or file name",
                        )
                    )
    return _named(cfg, out)


def layout_problems(cfg: BeamConfig, *, sizes_ok: bool = True) -> list[ConfigProblem]:
    """Placement, parallelism and SkyRL's batch arithmetic; divisibility only when `sizes_ok` (sizes positive)."""
    out: list[ConfigProblem] = []

    def bad(key: str, value: object, fix: str) -> None:
        out.append(ConfigProblem(key, value, fix))

    m = cfg.megatron
    if cfg.trainer.placement_colocated:
        if cfg.trainer.rollout_nodes:
            bad(
                "trainer.rollout_nodes",
                cfg.trainer.rollout_nodes,
                "colocated runs share every node: set trainer.rollout_nodes=0 or trainer.placement_colocated=false",
            )
    elif not 1 <= cfg.trainer.rollout_nodes < cfg.cluster.nodes:
        bad(
            "trainer.rollout_nodes",
            cfg.trainer.rollout_nodes,
            f"a split placement needs 1 <= rollout_nodes < cluster.nodes ({cfg.cluster.nodes})",
        )
    model_parallel = m.tensor_parallel * m.pipeline_parallel * m.context_parallel
    if sizes_ok and cfg.training_gpus % model_parallel:
        bad(
            "megatron.tensor_parallel",
            [m.tensor_parallel, m.pipeline_parallel, m.context_parallel],
            f"TP x PP x CP = {model_parallel} must divide the {cfg.training_gpus} training GPUs; "
            "change the Megatron sizes or cluster.nodes",
        )
    if sizes_ok and (cfg.training_gpus // m.pipeline_parallel) % (m.expert_parallel * m.expert_tensor_parallel):
        bad(
            "megatron.expert_parallel",
            m.expert_parallel,
            f"EP x ETP = {m.expert_parallel * m.expert_tensor_parallel} must divide training GPUs / PP = "
            f"{cfg.training_gpus // m.pipeline_parallel} (Megatron's expert grid)",
        )
    engines = cfg.num_engines
    if sizes_ok:
        if cfg.rollout.num_engines is not None and cfg.rollout.num_engines < 1:
            bad("rollout.num_engines", cfg.rollout.num_engines, "use a positive count or leave it empty to derive it")
        elif cfg.trainer.placement_colocated and engines * cfg.gpus_per_engine != cfg.training_gpus:
            bad(
                "rollout.num_engines",
                engines,
                f"colocated: vLLM engines x TP x PP ({engines} x {cfg.gpus_per_engine}) must equal the "
                f"{cfg.training_gpus} training GPUs; "
                f"make TP x PP divide {cfg.training_gpus} or leave num_engines empty",
            )
        elif not cfg.trainer.placement_colocated and not 1 <= engines * cfg.gpus_per_engine <= cfg.rollout_gpus:
            bad(
                "rollout.num_engines",
                engines,
                f"{engines} engines x {cfg.gpus_per_engine} GPUs do not fit the {cfg.rollout_gpus} rollout GPUs "
                "(trainer.rollout_nodes x gpus_per_node)",
            )

    b = cfg.batch
    if sizes_ok and cfg.data_parallel:
        if b.prompts_per_step % b.mini_batches:
            bad(
                "batch.mini_batches",
                b.mini_batches,
                f"must divide batch.prompts_per_step ({b.prompts_per_step}) into equal mini-batches",
            )
        else:
            dp = cfg.data_parallel
            sequences = cfg.mini_batch_prompts * b.responses_per_prompt
            if sequences % dp:
                bad(
                    "batch.prompts_per_step",
                    b.prompts_per_step,
                    f"each mini-batch has {sequences} responses, not divisible by the {dp} data-parallel ranks",
                )
            elif (sequences // dp) % m.micro_batch_size:
                bad(
                    "megatron.micro_batch_size",
                    m.micro_batch_size,
                    f"must divide the {sequences // dp} responses per data-parallel rank per mini-batch",
                )

    return out


def scaled_layout_hint(cfg: BeamConfig, *, up_to: int = 0) -> str:
    """Node (and rollout node) counts near cluster.nodes whose layout passes with every other setting unchanged."""
    nodes = cfg.cluster.nodes
    up_to = up_to or max(2 * nodes, 16)

    def works(total: int, rollout: int) -> bool:
        trial = copy.copy(cfg)
        trial.cluster = dataclasses.replace(cfg.cluster, nodes=total)
        trial.trainer = dataclasses.replace(cfg.trainer, rollout_nodes=rollout)
        return not layout_problems(trial)

    rollout = cfg.trainer.rollout_nodes
    counts = [n for n in range(1, up_to + 1) if n != nodes and works(n, rollout)]
    counts = sorted(counts, key=lambda n: (abs(n - nodes), n))[:4]
    parts = []
    if counts:
        parts.append("cluster.nodes=" + " or ".join(str(n) for n in sorted(counts)) + " works with the other settings")
    if not cfg.trainer.placement_colocated:
        splits = [r for r in range(1, nodes) if r != rollout and works(nodes, r)]
        splits = sorted(splits, key=lambda r: (abs(r - nodes / 2), r))[:3]
        if splits:
            parts.append(
                f"at {nodes} nodes trainer.rollout_nodes=" + " or ".join(str(r) for r in sorted(splits)) + " works"
            )
    return "; ".join(parts)


def skyrl_value_problems(cfg: BeamConfig) -> list[ConfigProblem]:
    """Settings whose text SkyRL's command-line parser would not read back exactly, even escaped (none known)."""
    return [
        ConfigProblem(
            key, value, "SkyRL's command-line parser would not read this text back as given; use a plain value"
        )
        for key, value in _text_settings(cfg)
        if not _reads_back(value)
    ]


def _text_settings(node: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, text) of every text setting of a typed config, list items included."""
    for f in dataclasses.fields(node):
        value, key = getattr(node, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from _text_settings(value, key + ".")
        elif isinstance(value, str):
            yield key, value
        elif isinstance(value, list):
            yield from ((f"{key}[{i}]", v) for i, v in enumerate(value) if isinstance(v, str))


def path_problems(cfg: BeamConfig, *, produced: Collection[str] = ()) -> list[ConfigProblem]:
    """Paths the job will read that are missing or unreadable on this host (the submit host for `plan`/`submit`);
    not the data files when `produced` holds "data" (an earlier stage writes them)."""
    if not cfg.cluster.check_paths_on_submit or unusable_text_problems(cfg):
        return []  # problems() reports the unusable paths; the file system would refuse to look them up
    out: list[ConfigProblem] = []
    host = socket.gethostname()
    escape = (
        "; where login nodes do not mount the compute storage set cluster.check_paths_on_submit=false "
        "(the job's preflight checks every node)"
    )

    def check(key: str, path: str | None, kind: str, fix: str) -> None:
        if not path or not path.startswith("/"):
            return  # missing or relative: problems() already names it
        target = Path(path)
        if not target.exists():
            out.append(ConfigProblem(key, path, f"does not exist on {host}; {fix}{escape}"))
        elif kind == "dir" and not target.is_dir():
            out.append(ConfigProblem(key, path, f"is not a directory; {fix}"))
        elif kind == "file" and not target.is_file():
            out.append(ConfigProblem(key, path, f"is not a file; {fix}"))
        elif not os.access(target, os.R_OK | (os.X_OK if target.is_dir() else 0)):
            out.append(ConfigProblem(key, path, f"is not readable by uid {os.getuid()}; fix its permissions"))

    p = cfg.paths
    check("paths.model_path", p.model_path, "dir", "give the Beam checkpoint directory (env MODEL_PATH)")
    if cfg.trainer.backend == "skyrl":
        check("paths.skyrl_dir", p.skyrl_dir, "dir", "clone SkyRL's beam-release branch there (env SKYRL_DIR)")
        if p.skyrl_dir and Path(p.skyrl_dir).is_dir():
            module = DAPO_MODULE.replace(".", "/") + ".py"
            if not (Path(p.skyrl_dir) / module).is_file():
                out.append(
                    ConfigProblem(
                        "paths.skyrl_dir",
                        p.skyrl_dir,
                        f"is not a SkyRL checkout (no {module}); "
                        "clone SkyRL's beam-release branch there (env SKYRL_DIR)",
                    )
                )
    if "data" not in produced and p.data_dir:
        if not Path(p.data_dir).is_dir():
            check("paths.data_dir", p.data_dir, "dir", "run `beam-slurm prepare-data` (env DATA_DIR)")
        else:
            for key, name in [("paths.train_file", p.train_file)] + [("paths.eval_files", f) for f in p.eval_files]:
                check(
                    key,
                    str(Path(p.data_dir, name)),
                    "file",
                    "run `beam-slurm prepare-data` into paths.data_dir, or submit with the data stage",
                )
    if cfg.checkpoint.resume_mode == "from_path":
        check("checkpoint.resume_path", cfg.checkpoint.resume_path, "dir", "give an existing global_step_N folder")
    return _named(cfg, out)


def validate_config(cfg: BeamConfig, *, check_paths: bool = False) -> None:
    """Raise ConfigError (exit status 2) listing every problem of `cfg`; `check_paths` adds `path_problems`."""
    found = problems(cfg) + (path_problems(cfg) if check_paths else [])
    if found:
        raise ConfigError(found)


def budget_problems(cfg: BeamConfig) -> list[ConfigProblem]:
    out: list[ConfigProblem] = []
    if not cfg.cluster.storage_write_gbytes_per_s > 0:
        out.append(
            ConfigProblem(
                "cluster.storage_write_gbytes_per_s",
                cfg.cluster.storage_write_gbytes_per_s,
                "use the storage's write bandwidth per node in GB/s (> 0), e.g. the preflight's",
            )
        )
    for key in (
        "cluster.interruptions_per_day",
        "cluster.log_copy_s",
        "trainer.rehearsal_save_s",
        "trainer.rehearsal_save_bytes",
        "trainer.rehearsal_model_load_s",
        "trainer.rehearsal_step_s",
    ):
        if value_at(cfg, key) < 0:
            out.append(ConfigProblem(key, value_at(cfg, key), "use 0 or more"))
    if not cfg.trainer.expected_step_s > 0:
        out.append(ConfigProblem("trainer.expected_step_s", cfg.trainer.expected_step_s, "use seconds > 0"))
    if cfg.checkpoint.gbytes_per_node is not None and cfg.checkpoint.gbytes_per_node < 0:
        out.append(
            ConfigProblem(
                "checkpoint.gbytes_per_node", cfg.checkpoint.gbytes_per_node, "use GB >= 0, or null for the estimate"
            )
        )
    return out
