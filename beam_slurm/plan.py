"""`beam-slurm plan`: the resource plan of a recipe, validated, before anything is submitted.

Usage: beam-slurm plan [--skyrl-overrides | --json] [hydra overrides...]

Starts fast: Hydra, OmegaConf and rich only (no Ray, torch or vLLM).
"""

from __future__ import annotations

import json
import sys

from rich.table import Table

from beam_slurm.config.errors import ConfigError
from beam_slurm.config.load import load_config
from beam_slurm.config.schema import env_sources
from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, schema_keys, table_console
from beam_slurm.core.layout import run_file
from beam_slurm.notice_budget import advise_interval, recipe_save_seconds, step_seconds
from beam_slurm.notice_budget import plan_rows as notice_rows
from beam_slurm.pipeline.goodput import measured, run_ledger
from beam_slurm.pipeline.runs import RunNotFound, resolve_run
from beam_slurm.sizing import (BF16_WEIGHTS_TB, CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE, FULL_CHECKPOINT_TB_TOTAL,
                               checkpoints_kept, full_checkpoint_tb_per_node, optimizer_state_tb_per_node)
from beam_slurm.skyrl.command import skyrl_launch
from beam_slurm.pipeline.stages import StageError, Train
from beam_slurm.evaluation import hang_guard
from beam_slurm.slurm import hang_watch, limits
from beam_slurm.slurm.preemption import read_preemption
from beam_slurm.slurm.submission import refusal_setting, sbatch_test_only
from beam_slurm.slurm.values import describe_seconds, time_limit_seconds


def _source(cfg, key: str) -> str:
    """Where a value the job gets from sbatch's side came from, when not the recipe: ' (from SBATCH_PARTITION)'."""
    variable = env_sources(cfg).get(key)
    return f" (from {variable})" if variable else ""


def _spare_rows(cfg) -> list[tuple[str, str, str]]:
    """What the hot spares hold (cluster.spare_nodes) and what a plain sbatch needs for them."""
    spares = cfg.cluster.spare_nodes
    if not spares:
        return []
    total = cfg.cluster.nodes + spares
    return [("resources", "spare nodes", f"{spares} (idle until a node fails: {spares * cfg.cluster.gpus_per_node * 24} "
             f"GPU-hours per day); allocation {total} nodes: `submit` asks for --nodes={total}, with plain sbatch "
             f"pass --nodes={total}")]


def plan_rows(cfg) -> list[tuple[str, str, str]]:
    """(section, item, value) rows: the numbers `plan` shows, computed from the config alone."""
    m, b, g = cfg.megatron, cfg.batch, cfg.generation
    responses = b.prompts_per_step * b.responses_per_prompt
    updates = b.mini_batches * cfg.max_training_steps
    rows = [
        ("run", "recipe / run name", f"{cfg.recipe} / {cfg.run_name}"),
        ("run", "trainer backend", cfg.trainer.backend + ("  (checks plumbing, does not train)" if cfg.trainer.backend == "rehearsal" else "")),
        ("run", "precision", cfg.precision + (f", rollouts {cfg.rollout.quantization}" if cfg.rollout.quantization else "")),
        ("run", "training", f"LoRA rank {cfg.lora.rank} alpha {cfg.lora.alpha} ({cfg.lora.target_modules}), lr {cfg.learning_rate:g}"
         if cfg.is_lora else f"full-parameter, lr {cfg.learning_rate:g}"),
        ("resources", "nodes x GPUs", f"{cfg.cluster.nodes} x {cfg.cluster.gpus_per_node} = {cfg.total_gpus} GPUs"),
        *_spare_rows(cfg),
        ("resources", "placement", "colocated (training and vLLM share every GPU)" if cfg.trainer.placement_colocated
         else f"split: {cfg.training_nodes} training nodes, {cfg.trainer.rollout_nodes} rollout nodes"),
        ("resources", "partition / account / qos", " / ".join(
            f"{getattr(cfg.cluster, key) or '(default)'}{_source(cfg, 'cluster.' + key)}"
            for key in ("partition", "account", "qos"))),
        ("resources", "time limit / notice", f"{cfg.cluster.time_limit}{_source(cfg, 'cluster.time_limit')} = "
         f"{describe_seconds(time_limit_seconds(cfg.cluster.time_limit))}, USR1 {cfg.cluster.signal_before_s} s before, "
         f"save grace {cfg.cluster.grace_s} s, max requeues {cfg.cluster.max_requeues}"),
        ("parallelism", "Megatron", f"TP{m.tensor_parallel} PP{m.pipeline_parallel} CP{m.context_parallel} "
         f"EP{m.expert_parallel} ETP{m.expert_tensor_parallel} on {cfg.training_gpus} GPUs"),
        ("parallelism", "data-parallel size", str(cfg.data_parallel)),
        ("parallelism", "vLLM replicas", f"{cfg.num_engines} x (TP{cfg.rollout.tensor_parallel} x PP{cfg.rollout.pipeline_parallel})"
         f" = {cfg.num_engines * cfg.gpus_per_engine} GPUs, {cfg.executor_backend} executor"),
        ("parallelism", "per vLLM replica", f"{responses / max(cfg.num_engines, 1):g} responses "
         f"({b.prompts_per_step / max(cfg.num_engines, 1):g} prompts) per step"),
        ("batch", "prompts x responses", f"{b.prompts_per_step} x {b.responses_per_prompt} = {responses} responses per step"),
        ("batch", "mini-batches", f"{b.mini_batches} per step of {cfg.mini_batch_prompts} prompts "
         f"({cfg.mini_batch_prompts * b.responses_per_prompt // max(cfg.data_parallel, 1)} responses per DP rank)"),
        ("batch", "optimizer updates", f"{updates} over {cfg.max_training_steps} steps"),
        ("tokens", "budget", f"{g.max_prompt_tokens} prompt + {g.max_response_tokens} response tokens; "
         f"<= {responses * (g.max_prompt_tokens + g.max_response_tokens) / 1e6:.2f} M tokens per step"),
        ("tokens", "sampling", f"temperature {g.temperature}, top-p {g.top_p}, reasoning effort {g.reasoning_effort}"),
        ("eval", "AIME", f"every {cfg.eval.interval} steps, {cfg.eval.responses_per_problem} responses per problem "
         f"({', '.join(cfg.paths.eval_files)})" + ("" if cfg.eval.in_training else "; chained jobs only")),
        ("checkpoints", "interval / kept", f"every {cfg.checkpoint.interval} steps, {checkpoints_kept(cfg)} kept, "
         f"resume {cfg.checkpoint.resume_mode}"),
    ]
    rows += storage_rows(cfg)
    rows += notice_rows(cfg, read_preemption(cfg.cluster.partition))  # the notice budget and interval advice
    rows += hang_watch.plan_rows(hang_watch.HangLimits.of(cfg), cfg.trainer.extra_env)
    rows.append(("hang watchdog", "evaluation tasks", hang_guard.describe(
        cfg.eval.hang_timeout_s, float(cfg.trainer.expected_model_load_s))))
    if cfg.rollout.routing_replay and cfg.executor_backend == "ray":
        rows.append(("notes", "SkyRL version", "R3 with a vLLM replica spanning nodes (executor ray) needs the Beam "
                     "branch of SkyRL; stock 0.3.0 accepts R3 only with replicas inside one node (mp)"))
    rows += [
        ("paths", "model", str(cfg.paths.model_path)),
        ("paths", "data", str(cfg.paths.data_dir)),
        ("paths", "checkpoints", str(cfg.paths.ckpt_path)),
        ("paths", "exports / evals", str(cfg.paths.export_path)),
        ("paths", "container", f"{cfg.container.runtime}" + (f" {cfg.container.image}" if cfg.container.image else "")),
    ]
    return rows


def storage_rows(cfg) -> list[tuple[str, str, str]]:
    """Storage estimate from the seed's numbers, scaled to this layout."""
    kept = checkpoints_kept(cfg)
    rows = [("storage", "model weights (BF16)", f"~{BF16_WEIGHTS_TB:.1f} TB on shared storage, read by every node")]
    if cfg.is_lora:
        rows.append(("storage", "checkpoints", f"{kept} LoRA adapter checkpoints (adapters and their optimizer only)"))
        return rows
    per_node_ckpt = full_checkpoint_tb_per_node(cfg)
    rows.append(("storage", "checkpoints", f"~{per_node_ckpt:.2f} TB per training node per checkpoint "
                 f"(~{FULL_CHECKPOINT_TB_TOTAL:.0f} TB total); {kept} kept = ~{kept * FULL_CHECKPOINT_TB_TOTAL:.0f} TB"))
    if cfg.paths.optimizer_state_disk_dir:
        rows.append(("storage", "optimizer state", f"~{optimizer_state_tb_per_node(cfg):.2f} TB per node on node-local "
                     f"NVMe at {cfg.paths.optimizer_state_disk_dir}"))
    else:
        rows.append(("storage", "optimizer state", f"CPU optimizer: ~{CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE} TB host RAM per node"))
    return rows


def print_plan(cfg, launch, extra_rows: list[tuple[str, str, str]] = ()) -> None:
    table = Table(title=f"beam-slurm plan: {cfg.recipe}", show_lines=False)
    table.add_column("section", style="cyan", no_wrap=True)
    table.add_column("item", style="bold")
    table.add_column("value", overflow="fold")  # a long key wraps onto the next line rather than being cut
    previous = None
    for section, item, value in [*plan_rows(cfg), *extra_rows]:
        table.add_row(section if section != previous else "", item, value)
        previous = section
    console = table_console()
    console.print(table)
    console.print("[bold]SkyRL command[/bold] (run on the head node inside the allocation):", highlight=False)
    console.print(launch.shell(cfg.trainer.python), highlight=False, soft_wrap=True, markup=False)


def build_parser():
    """The verb's parser: --skyrl-overrides, --json, and every recipe key."""
    verb = VerbArgs("plan", "The resource plan of a recipe, validated, and the exact SkyRL command; nothing is "
                    "submitted.", keys=list(schema_keys()))
    verb.add_argument("--skyrl-overrides", action="store_true", help="print only SkyRL's key=value list")
    verb.add_argument("--json", action="store_true", help="print the plan, the SkyRL command and its env as JSON")
    verb.add_argument("--from", dest="history", metavar="RUN",
                      help="advise from this run's measurements (default: the run of this run name, if it has run)")
    return verb


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        parsed = verb.parse(argv)
    except VerbUsageError as exc:
        return verb.fail(exc)
    if parsed.args.skyrl_overrides and parsed.args.json:
        return verb.fail("--skyrl-overrides and --json: choose one")
    try:
        cfg = load_config(parsed.overrides, check_paths=True)  # on this (the submit) host: model, SkyRL, data
    except ConfigError as exc:
        return verb.config_failed(exc, what="; nothing was submitted")
    launch = skyrl_launch(cfg)
    asked = slurm_rows(cfg, parsed.overrides) if not parsed.args.skyrl_overrides else []
    try:
        asked += history_rows(cfg, parsed.args.history) if not parsed.args.skyrl_overrides else []
    except RunNotFound as exc:
        return verb.fail(f"--from {parsed.args.history}: {exc}")
    if parsed.args.skyrl_overrides:
        sys.stdout.write("".join(o + "\n" for o in launch.overrides))
    elif parsed.args.json:
        print(json.dumps({"rows": plan_rows(cfg) + asked, "module": launch.module, "overrides": launch.overrides,
                          "env": launch.env, "cwd": launch.cwd}, indent=2))
    else:
        print_plan(cfg, launch, asked)
    return 2 if any(value.startswith(("REFUSED", "NEVER STARTS")) for _, _, value in asked) else 0


def history_rows(cfg, history: str | None) -> list[tuple[str, str, str]]:
    """What the run's own attempts measured (`--from RUN`, else this run name's run when it has one), each row
    saying which numbers are measured and which are the recipe's, and the checkpoint interval advised from them."""
    export_path = resolve_run(history) if history else cfg.paths.export_path
    if not export_path or not run_file(export_path).is_file():
        return []
    m = measured(run_ledger(export_path))
    if not m.attempts:
        return []
    t, c = cfg.trainer, cfg.cluster

    def source(value: float | None, default: float, key: str) -> tuple[float, str]:
        return (value, "measured") if value is not None else (float(default), f"default {key}")

    step, step_from = source(m.step_s, step_seconds(cfg)[0], "(recipe's step time)")
    save, save_from = source(m.save_s, recipe_save_seconds(cfg), "(recipe's save estimate)")
    bring_up, bring_from = source(m.bring_up_s, t.expected_bringup_s, "trainer.expected_bringup_s")
    load, load_from = source(m.model_load_s, t.expected_model_load_s, "trainer.expected_model_load_s")
    per_day, day_from = source(m.interruptions_per_day, c.interruptions_per_day, "cluster.interruptions_per_day")
    advice = advise_interval(save_s=save, step_s=step, interruptions_per_day=per_day,
                             configured_steps=cfg.checkpoint.interval, max_steps=cfg.max_training_steps)
    limit = time_limit_seconds(c.time_limit)
    reach = (f"; one attempt of {c.time_limit} reaches about {max(int((limit - bring_up - load) // step), 0)} "
             "steps") if limit and step > 0 else ""
    return [("history", "measured in", f"{export_path}: {m.attempts} attempts, {m.allocated_hours:.2f} h of "
             f"allocation, {m.faults} ended without a notice"),
            ("history", "bring-up / model load", f"{bring_up:,.0f} s ({bring_from}) / {load:,.0f} s ({load_from})"
             + reach),
            ("history", "step / save", f"{step:,.1f} s ({step_from}) / {save:,.1f} s ({save_from})"),
            ("history", "interruptions", f"{per_day:.1f} per day of allocation ({day_from})"),
            ("history", "interval advice", f"every {advice.advised_steps} steps: {advice.advised_waste:.1%} of GPU "
             f"time to saves and redone steps; configured every {advice.configured_steps}: "
             f"{advice.configured_waste:.1%} (from the numbers above)")]


def slurm_rows(cfg, overrides: list[str]) -> list[tuple[str, str, str]]:
    """What Slurm says of the training job (`sbatch --test-only`), unless cluster.ask_slurm_on_submit=false."""
    if not cfg.cluster.ask_slurm_on_submit:
        return [("slurm", "sbatch --test-only", "not asked (cluster.ask_slurm_on_submit=false)")]
    try:
        request = Train(cfg, overrides).render().request
    except StageError as exc:
        return [("slurm", "sbatch --test-only", f"not asked: {exc}")]
    answer = sbatch_test_only(request)
    if answer.accepted is None:
        return [("slurm", "sbatch --test-only", f"not asked: Slurm could not be reached ({answer.text})")]
    if not answer.accepted:
        return [("slurm", "sbatch --test-only", f"REFUSED: {answer.text}; change {refusal_setting(answer.text)}")]
    rows = [("slurm", "sbatch --test-only", f"accepted: {answer.text}")]
    found = limits.check_job(limits.job_shape(request))
    rows += [("slurm", f"partition {p.name}", p.describe()) for p in found.partitions]
    rows += [("slurm", "limits", f"not read: {text}") for text in found.unread]
    rows += [("slurm", "limits", f"NEVER STARTS: {breach}") for breach in found.breaches]
    if not found.breaches and not found.unread:
        rows.append(("slurm", "limits", "within the partition's limits" + (
            " and the QOS's and association's" if found.accounting_enforced else
            " (QOS and association limits are not enforced here)")))
    return rows
