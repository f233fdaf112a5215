"""An evaluation request, shared by `beam-slurm evaluate` and the evaluation chain the training job runs: the keys it
reads, its arguments, and the chained evaluation of one export."""

from __future__ import annotations

from pathlib import Path

from beam_slurm.config.load import load_config
from beam_slurm.config.overrides import hydra_value, override, value_at
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.verb_args import VerbArgs, keys_under
from beam_slurm.core.errors import UserError
from beam_slurm.core.layout import evaluation_dir
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.evaluation.checkpoints import is_adapter
from beam_slurm.launch import eval_array as array

# the recipe keys `evaluate` reads (the pipeline renders these for evaluation jobs)
EVALUATE_KEYS = [
    "eval.responses_per_problem",
    "generation.max_response_tokens",
    "generation.max_prompt_tokens",
    "generation.temperature",
    "generation.top_p",
    "generation.reasoning_effort",
    "rollout.tensor_parallel",
    "rollout.pipeline_parallel",
    "rollout.executor_backend",
    "eval.limit",
    "eval.dtype",
    "eval.gpu_memory_utilization",
    "eval.enforce_eager",
    "eval.server_request_timeout_s",
    "eval.server_max_attempts",
    "eval.server_concurrency",
    "grade.timeout_s",
    "grade.memory_mb",
    "grade.workers",
    "eval.chunk_problems",
    "paths.data_dir",
    "paths.eval_files",
]


# The cluster keys an evaluation array takes from the run (its eval.launcher keys fill in from them).
CLUSTER_KEYS = ("cluster.gpus_per_node", "cluster.partition", "cluster.account", "cluster.qos")


def build_parser():
    verb = VerbArgs(
        "evaluate",
        "Evaluate checkpoints on AIME (vLLM generation, grading, metrics) as one Slurm job "
        "array. Settings are recipe keys, e.g.\n  beam-slurm evaluate RUN eval.responses_per_problem=32 "
        "eval.launcher.partition=gpu\n  beam-slurm evaluate -m SWEEP_DIR eval.responses_per_problem=8,32 "
        "--wait",
        keys=[*EVALUATE_KEYS, "eval.chain_settle_s", *keys_under("eval.launcher"), *CLUSTER_KEYS],
        inputs="[RUN | SWEEP]",
    )
    source = verb.add_argument_group(
        "what to evaluate (or a positional RUN | SWEEP: a run folder, name or job id, or a sweep folder)"
    )
    source.add_argument(
        "--checkpoint",
        help="HF export dir (<export_path>/global_step_N[/policy]), any HF model "
        "dir, or a LoRA adapter dir (with --base-model)",
    )
    source.add_argument(
        "--checkpoint-list",
        metavar="FILE",
        help="one checkpoint per line; job-array task i (SLURM_ARRAY_TASK_ID) evaluates line i",
    )
    source.add_argument("--base-model", help="base model dir for a LoRA adapter checkpoint")
    source.add_argument(
        "--data",
        action="append",
        metavar="FILE.parquet",
        help="cleaned AIME parquet (repeat for several); default: paths.eval_files in paths.data_dir",
    )
    server = verb.add_argument_group("already running OpenAI-compatible server (instead of the offline engine)")
    server.add_argument(
        "--server", metavar="URL", help="e.g. http://node1:8000; the token, if any, is read from $OPENAI_API_KEY"
    )
    server.add_argument("--served-model", help="model name on the server (default: the first it lists)")
    output = verb.add_argument_group("output")
    output.add_argument("--out", help="output dir (default <export_path>/beam_evals/global_step_N/)")
    output.add_argument("--force", action="store_true", help="redo generation and grading even if results exist")
    output.add_argument(
        "--check", action="store_true", help="only check the inputs and print what would run (status 2 on bad input)"
    )
    where = verb.add_argument_group("where it runs (default: one Slurm job array through submitit, eval.launcher.*)")
    where.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="sweep: key=a,b values expand as with `submit -m` (Hydra's override grammar)",
    )
    where.add_argument("--wait", action="store_true", help="wait for the array, show progress, print the table")
    where.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    return verb


class UsageError(UserError, ValueError):
    """Bad command-line input; reported with exit status 2."""


def data_files(given: list[str] | None, cfg: BeamConfig) -> list[str]:
    if given:
        return list(given)
    if not cfg.paths.data_dir:
        raise UsageError(
            "--data FILE.parquet is required, or paths.data_dir (env DATA_DIR) to read the recipe's "
            f"paths.eval_files ({', '.join(cfg.paths.eval_files)}) from"
        )
    return [str(Path(cfg.paths.data_dir) / name) for name in cfg.paths.eval_files]


def chained_overrides(cfg: BeamConfig, step: int, extra_args: list[str] | None = None) -> list[str]:
    """The keys of step `step`'s chained evaluation: the run's own values (also of the eval.launcher.* and cluster
    keys the array reads, so a chained array gets the run's), then `extra_args` last, so they win."""
    launcher = {key: value_at(cfg, key) for key in [*keys_under("eval.launcher"), *CLUSTER_KEYS]}
    overrides = [override(key, value_at(cfg, key)) for key in EVALUATE_KEYS]
    overrides += [
        f"{key}={{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
        if isinstance(value, dict)
        else override(key, value)
        for key, value in launcher.items()
    ]
    overrides.append(override("eval.launcher.name", f"{cfg.run_name}-eval-{step}"))
    if not cfg.eval.launcher.submitit_folder:
        overrides.append(override("eval.launcher.submitit_folder", f"{cfg.paths.log_dir}/eval-step{step}-%j"))
    return overrides + build_parser().parse(list(extra_args or [])).overrides


def submit_for_checkpoint(cfg: BeamConfig, step: int, checkpoint: str, extra_args: list[str] | None = None) -> str:
    """The chained evaluation of one export, by `evaluate --checkpoint`'s path; the job id, or 'finished'."""
    assert cfg.paths.export_path is not None  # fill_defaults sets it
    overrides = chained_overrides(cfg, step, extra_args)
    folder = Path(checkpoint)
    base_model = str(cfg.paths.model_path) if cfg.is_lora and is_adapter(folder) else None
    found = array.plan(
        [(overrides, load_config(overrides, validate=False))],
        [(str(folder), None, evaluation_dir(cfg.paths.export_path, step))],
        lambda c: data_files(None, c),
        force=False,
        base_model=base_model,
    )
    ids = array.submit_plan(found)
    array_id = ids[0] if len(ids) == 1 else ids[0].split("_")[0] if ids else ""
    if array_id:
        RunStore(cfg.paths.export_path).record_evaluation(step, str(checkpoint), array_id, None)
    return array_id or "finished"
