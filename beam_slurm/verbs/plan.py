"""`beam-slurm plan`: a recipe's resource plan, validated before anything is submitted; Hydra, OmegaConf, rich only."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from rich.table import Table

from beam_slurm.config.choices import Precision, RecipeBackend, ResumeMode
from beam_slurm.config.load import load_config
from beam_slurm.config.overrides import override_key
from beam_slurm.config.ports import describe_block
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.skyrl_command import skyrl_launch
from beam_slurm.config.sources import env_sources, measured_keys, profile_of, value_source
from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, schema_keys, table_console
from beam_slurm.core.errors import ConfigError
from beam_slurm.core.json_text import JsonFloat, json_text
from beam_slurm.core.layout import run_file
from beam_slurm.jobs.evaluation import hang_guard
from beam_slurm.launch.runs import RunNotFound, resolve_run
from beam_slurm.launch.stages import PrepareData, PullContainer, StageError, Train
from beam_slurm.policy import hang_watch
from beam_slurm.policy.goodput import measured, run_ledger
from beam_slurm.policy.notice_budget import (
    SaveCost,
    advise_interval,
    attempt_progress,
    checkpoint_bytes_per_node,
    recipe_advice,
    recipe_budget,
    recipe_save_seconds,
    step_seconds,
    stop_seconds,
)
from beam_slurm.policy.notice_budget import plan_rows as notice_rows
from beam_slurm.policy.sizing import (
    BF16_WEIGHTS_TB,
    CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE,
    FULL_CHECKPOINT_TB_TOTAL,
    checkpoints_kept,
    full_checkpoint_tb_per_node,
    optimizer_state_tb_per_node,
)
from beam_slurm.slurm import limits
from beam_slurm.slurm.preemption import read_preemption
from beam_slurm.slurm.submission import refusal_setting, sbatch_test_only
from beam_slurm.slurm.values import describe_seconds, time_limit_seconds


class MeasuredValue(TypedDict):
    """A number `plan --from RUN` used: the run's own measurement, else the recipe's value."""

    value: float
    source: str  # `measured`, or the key (or estimate) the value came from instead


class PlanHistory(TypedDict):
    """What the run's own attempts measured (`--from RUN`, else the run of this run name) and the advice from it."""

    export_path: str  # the run measured
    attempts: int
    allocated_hours: float
    faults: int  # attempts that ended without a notice
    step_s: MeasuredValue
    save_s: MeasuredValue
    bring_up_s: MeasuredValue
    model_load_s: MeasuredValue
    interruptions_per_day: MeasuredValue  # per day of allocation
    steps_per_attempt: int | None  # steps one attempt reaches within the time limit; null without one
    advised_interval: int  # checkpoint interval (steps) that loses the least GPU time
    advised_waste: JsonFloat  # share of GPU time lost to saves and redone steps at the advised interval
    configured_interval: int
    configured_waste: JsonFloat


class PartitionJson(TypedDict):
    """One partition's limits as scontrol prints them; null where it has none."""

    name: str
    max_time_s: int | None
    default_time_s: int | None
    max_nodes: int | None
    total_nodes: int
    state: str
    text: str  # the same in a sentence


class NeverStarts(TypedDict):
    """A limit the job breaks: Slurm would queue it and never start it."""

    text: str
    fix: str  # the setting to change


class SlurmCheck(TypedDict):
    """What Slurm says of the training job: `sbatch --test-only`, then the limits it would wait on for ever."""

    asked: bool  # false: not asked (cluster.ask_slurm_on_submit=false, or Slurm could not be reached); `answer` says
    accepted: bool | None  # null when not asked
    answer: str  # Slurm's answer, or why it was not asked
    fix: str | None  # on a refusal: the setting to change
    partitions: list[PartitionJson]
    limits_unread: list[str]  # limits that could not be read, and why
    never_starts: list[NeverStarts]
    accounting_enforced: bool | None  # whether QOS and association limits are enforced; null when not read


class PlanRow(TypedDict):
    """A row of the table `plan` prints."""

    section: str
    item: str
    text: str
    fix: NotRequired[list[str]]  # where the table has a fix row under it: each way out


class StageCommand(TypedDict):
    """The sbatch command of one stage `submit` would queue."""

    stage: str  # data, container or train
    command: str | None  # null when the stage cannot be rendered (`not_needed` says why)
    not_needed: str | None  # why the stage needs no job (the image is there, or the recipe needs none), else null


class PlanResources(TypedDict):
    """The allocation: nodes, GPUs, partition, time limit and the notice before it."""

    nodes: int
    spare_nodes: int  # hot spares, idle until a node fails
    gpus_per_node: int
    total_gpus: int
    training_nodes: int
    rollout_nodes: int  # 0 when training and vLLM share every GPU
    colocated: bool
    partition: str | None
    account: str | None
    qos: str | None
    time_limit: str  # as given: `24:00:00`
    time_limit_s: int | None  # null when unlimited
    signal_before_s: int  # the time-limit notice (USR1) this long before the end
    grace_s: int  # how long the job waits for the save after the notice
    max_requeues: int
    from_env: dict[str, str]  # key -> the environment variable its value came from
    constraint: str | None


class ProfileSite(TypedDict):
    """What `doctor` measured on the site, as the profile keeps it; null where nothing was measured."""

    slurm_version: str | None
    signal_early_s: float | None  # how much earlier than asked the --signal came
    requeue_hold_s: float | None
    local_write_gbytes_per_s: float | None
    queue_wait_s: float | None


class PlanProfile(TypedDict):
    """The site profile (`cluster=NAME`) and the keys it gave."""

    name: str
    path: str
    keys: list[str]  # the keys it gave (those the command line or a variable overruled are not among them)
    measured: list[str]  # those of its keys `doctor --probe` measured
    measured_at: str | None
    site: ProfileSite


class PlanParallelism(TypedDict):
    """How training (Megatron) and generation (vLLM) split the GPUs."""

    tensor_parallel: int
    pipeline_parallel: int
    context_parallel: int
    expert_parallel: int
    expert_tensor_parallel: int
    training_gpus: int
    data_parallel: int
    vllm_replicas: int
    vllm_tensor_parallel: int
    vllm_pipeline_parallel: int
    vllm_gpus: int
    executor_backend: str  # ray (a replica spans nodes) or mp


class PlanBatch(TypedDict):
    """Prompts and responses per step, and the optimizer updates they make."""

    prompts_per_step: int
    responses_per_prompt: int
    responses_per_step: int
    mini_batches: int
    mini_batch_prompts: int
    max_training_steps: int
    optimizer_updates: int


class PlanTokens(TypedDict):
    """The token budget of a step."""

    max_prompt_tokens: int
    max_response_tokens: int
    max_tokens_per_step: int


class PlanCheckpoints(TypedDict):
    """How often the run saves, and how big a save is."""

    interval: int  # steps between checkpoints
    kept: int
    resume_mode: ResumeMode
    bytes_per_node: float
    bytes_from: str  # where the size comes from (measured, or an estimate)


class PlanNotice(TypedDict):
    """The time-limit notice's budget: whether a save at the next step fits between the notice and the kill."""

    lead_s: float  # from the notice to the kill
    step_s: float  # the step the trainer finishes before it saves
    step_from: str
    save_s: float | None  # null when unbounded
    write_gbytes_per_s: float
    stop_ray_s: float
    log_copy_s: float
    stop_from: str
    needed_s: float | None  # step, save, stopping Ray and copying logs; null when unbounded
    save_fits: bool
    fits_lead: bool
    fits_grace: bool
    fix: list[str]  # each way to make it fit; empty when it does


class PlanAttempt(TypedDict):
    """What one attempt (one allocation) reaches before its time limit."""

    time_limit_s: float | None
    start_s: float  # bring-up and model load before the first step
    train_s: float | None
    steps: float | None  # steps before the notice; null when unbounded
    finishes_in_one: bool
    reaches_checkpoint: bool
    stalls: bool  # no attempt reaches a checkpoint: the run would requeue for ever
    fix: list[str]


class PlanPreemption(TypedDict):
    """How a preemption reaches the job on its partition and QOS; null where Slurm was not asked."""

    asked: bool
    why_not: str | None  # why Slurm could not be asked
    partition: str
    preemptable: bool | None
    mode: str | None  # PreemptMode: REQUEUE, CANCEL, SUSPEND, ...
    grace_s: int | None  # GraceTime: from the preemption's SIGTERM to the kill
    user_signal: bool | None  # whether the job's --signal is sent on a preemption
    save_fits: bool | None  # whether a save fits in the grace time; null where the question does not arise


class PlanIntervalAdvice(TypedDict):
    """The checkpoint interval that loses the least GPU time to saves and redone steps (shares of GPU time)."""

    advised_steps: int
    configured_steps: int
    advised_waste: float | None
    configured_waste: float | None
    interruptions_per_day: float


class PlanSkyrl(TypedDict):
    """The SkyRL command the training job runs on the head node."""

    module: str  # run with `python -m`
    overrides: list[str]  # `key=value`, later ones win
    env: dict[str, str]  # no secrets: tokens travel as files
    cwd: str | None  # the SkyRL checkout
    command: str  # all of it as one shell line (a secret's value shows as `<set>`)


class PlanJson(TypedDict):
    """`plan --json`: the recipe's resource plan, validated, and the exact SkyRL command; nothing is submitted. Exit 2
    when Slurm refuses the job or a limit would never start it."""

    recipe: str
    run_name: str | None
    trainer_backend: RecipeBackend
    rehearsal: bool  # trainer.backend=rehearsal: it checks the plumbing, it does not train
    precision: Precision
    lora: bool
    resources: PlanResources
    profile: PlanProfile | None  # the site profile, null without one
    parallelism: PlanParallelism
    batch: PlanBatch
    tokens: PlanTokens
    checkpoints: PlanCheckpoints
    notice: PlanNotice
    attempt: PlanAttempt
    preemption: PlanPreemption
    interval_advice: PlanIntervalAdvice
    slurm: SlurmCheck
    sbatch: list[StageCommand]  # per stage (data, container, train)
    skyrl: PlanSkyrl
    findings: list[PlanRow]  # the rows that need a change: a fix, a refusal, a limit that never starts the job
    rows: list[PlanRow]  # the table `plan` prints
    config: dict[str, Any]  # the resolved recipe, every key
    history: PlanHistory | None  # null when the run has not run (or recorded no attempt)


JSON_OUTPUT = PlanJson


def _source(cfg: BeamConfig, key: str) -> str:
    """Where a value came from, when not the recipe nor the command line: ' (from SBATCH_PARTITION)', ' (profile
    lab)', ' (measured, profile lab)'."""
    source = value_source(cfg, key)
    return f" ({source})" if source else ""


def _profile_rows(cfg: BeamConfig) -> list[tuple[str, str, str]]:
    """The site profile and the keys it gave (those the command line or a variable overruled are not among them)."""
    profile = profile_of(cfg)
    if profile is None:
        return []
    measured = measured_keys(cfg)
    keys = ", ".join(f"{k} (measured)" if k in measured else k for k in profile.keys if not k.startswith("site."))
    rows = [("run", "site profile", f"{profile.name} ({profile.path}): {keys or 'no keys'}")]
    found = [
        f"{words} {value:g}{unit}"
        for words, value, unit in (
            ("--signal up to", cfg.site.signal_early_s, " s earlier than asked"),
            ("requeue hold", cfg.site.requeue_hold_s, " s"),
            ("node-local disk", cfg.site.local_write_gbytes_per_s, " GB/s"),
            ("queue wait", cfg.site.queue_wait_s, " s"),
        )
        if value is not None
    ]
    if found or cfg.site.slurm_version:
        when = f"doctor, {cfg.site.measured_at}" if cfg.site.measured_at else "doctor"
        version = f"Slurm {cfg.site.slurm_version}: " if cfg.site.slurm_version else ""
        rows.append(("run", "site", f"{version}{', '.join(found) or 'nothing measured'} ({when})"))
    return rows


def _spare_rows(cfg: BeamConfig) -> list[tuple[str, str, str]]:
    """What the hot spares hold (cluster.spare_nodes) and what a plain sbatch needs for them."""
    spares = cfg.cluster.spare_nodes
    if not spares:
        return []
    total = cfg.cluster.nodes + spares
    return [
        (
            "resources",
            "spare nodes",
            f"{spares} (idle until a node fails: {spares * cfg.cluster.gpus_per_node * 24} "
            f"GPU-hours per day); allocation {total} nodes: `submit` asks for --nodes={total}, with plain sbatch "
            f"pass --nodes={total}",
        )
    ]


def plan_rows(cfg: BeamConfig, preemption=None) -> list[tuple[str, str, str]]:
    """(section, item, value) rows: the numbers `plan` shows, computed from the config alone."""
    assert cfg.cluster.time_limit is not None  # fill_defaults puts the schema's default back
    m, b, g = cfg.megatron, cfg.batch, cfg.generation
    responses = b.prompts_per_step * b.responses_per_prompt
    updates = b.mini_batches * cfg.max_training_steps
    rows = [
        ("run", "recipe / run name", f"{cfg.recipe} / {cfg.run_name}"),
        (
            "run",
            "trainer backend",
            cfg.trainer.backend + ("  (checks plumbing, does not train)" if cfg.trainer.backend == "rehearsal" else ""),
        ),
        (
            "run",
            "precision",
            cfg.precision + (f", rollouts {cfg.rollout.quantization}" if cfg.rollout.quantization else ""),
        ),
        (
            "run",
            "training",
            f"LoRA rank {cfg.lora.rank} alpha {cfg.lora.alpha} ({cfg.lora.target_modules}), lr {cfg.learning_rate:g}"
            if cfg.is_lora
            else f"full-parameter, lr {cfg.learning_rate:g}",
        ),
        *_profile_rows(cfg),
        ("resources", "nodes x GPUs", f"{cfg.cluster.nodes} x {cfg.cluster.gpus_per_node} = {cfg.total_gpus} GPUs"),
        *_spare_rows(cfg),
        (
            "resources",
            "placement",
            "colocated (training and vLLM share every GPU)"
            if cfg.trainer.placement_colocated
            else f"split: {cfg.training_nodes} training nodes, {cfg.trainer.rollout_nodes} rollout nodes",
        ),
        (
            "resources",
            "partition / account / qos",
            " / ".join(
                f"{getattr(cfg.cluster, key) or '(default)'}{_source(cfg, 'cluster.' + key)}"
                for key in ("partition", "account", "qos")
            ),
        ),
        (
            "resources",
            "time limit / notice",
            f"{cfg.cluster.time_limit}{_source(cfg, 'cluster.time_limit')} = "
            f"{describe_seconds(time_limit_seconds(cfg.cluster.time_limit))}, "
            f"USR1 {cfg.cluster.signal_before_s} s before{_source(cfg, 'cluster.signal_before_s')}, "
            f"save grace {cfg.cluster.grace_s} s{_source(cfg, 'cluster.grace_s')}, "
            f"max requeues {cfg.cluster.max_requeues}",
        ),
        (
            "parallelism",
            "Megatron",
            f"TP{m.tensor_parallel} PP{m.pipeline_parallel} CP{m.context_parallel} "
            f"EP{m.expert_parallel} ETP{m.expert_tensor_parallel} on {cfg.training_gpus} GPUs",
        ),
        ("parallelism", "data-parallel size", str(cfg.data_parallel)),
        (
            "parallelism",
            "vLLM replicas",
            f"{cfg.num_engines} x (TP{cfg.rollout.tensor_parallel} x PP{cfg.rollout.pipeline_parallel})"
            f" = {cfg.num_engines * cfg.gpus_per_engine} GPUs, {cfg.executor_backend} executor",
        ),
        (
            "parallelism",
            "per vLLM replica",
            f"{responses / max(cfg.num_engines, 1):g} responses "
            f"({b.prompts_per_step / max(cfg.num_engines, 1):g} prompts) per step",
        ),
        (
            "batch",
            "prompts x responses",
            f"{b.prompts_per_step} x {b.responses_per_prompt} = {responses} responses per step",
        ),
        (
            "batch",
            "mini-batches",
            f"{b.mini_batches} per step of {cfg.mini_batch_prompts} prompts "
            f"({cfg.mini_batch_prompts * b.responses_per_prompt // max(cfg.data_parallel, 1)} responses per DP rank)",
        ),
        ("batch", "optimizer updates", f"{updates} over {cfg.max_training_steps} steps"),
        (
            "tokens",
            "budget",
            f"{g.max_prompt_tokens} prompt + {g.max_response_tokens} response tokens; "
            f"<= {responses * (g.max_prompt_tokens + g.max_response_tokens) / 1e6:.2f} M tokens per step",
        ),
        ("tokens", "sampling", f"temperature {g.temperature}, top-p {g.top_p}, reasoning effort {g.reasoning_effort}"),
        (
            "eval",
            "AIME",
            f"every {cfg.eval.interval} steps, {cfg.eval.responses_per_problem} responses per problem "
            f"({', '.join(cfg.paths.eval_files)})" + ("" if cfg.eval.in_training else "; chained jobs only"),
        ),
        (
            "checkpoints",
            "interval / kept",
            f"every {cfg.checkpoint.interval} steps, {checkpoints_kept(cfg)} kept, resume {cfg.checkpoint.resume_mode}",
        ),
    ]
    rows.append(("ray", "ports", describe_block(cfg.ray)))
    rows += storage_rows(cfg)
    rows += notice_rows(cfg, preemption)  # the notice budget and interval advice
    rows += hang_watch.plan_rows(hang_watch.HangLimits.of(cfg), cfg.trainer.extra_env)
    rows.append(
        (
            "hang watchdog",
            "evaluation tasks",
            hang_guard.describe(cfg.eval.hang_timeout_s, float(cfg.trainer.expected_model_load_s)),
        )
    )
    if cfg.rollout.routing_replay and cfg.executor_backend == "ray":
        rows.append(
            (
                "notes",
                "SkyRL version",
                "R3 with a vLLM replica spanning nodes (executor ray) needs the Beam "
                "branch of SkyRL; stock 0.3.0 accepts R3 only with replicas inside one node (mp)",
            )
        )
    return rows + [
        ("paths", "model", str(cfg.paths.model_path)),
        ("paths", "data", str(cfg.paths.data_dir)),
        ("paths", "checkpoints", str(cfg.paths.ckpt_path)),
        ("paths", "exports / evals", str(cfg.paths.export_path)),
        ("paths", "container", f"{cfg.container.runtime}" + (f" {cfg.container.image}" if cfg.container.image else "")),
    ]


def storage_rows(cfg: BeamConfig) -> list[tuple[str, str, str]]:
    kept = checkpoints_kept(cfg)
    rows = [("storage", "model weights (BF16)", f"~{BF16_WEIGHTS_TB:.1f} TB on shared storage, read by every node")]
    if cfg.is_lora:
        rows.append(("storage", "checkpoints", f"{kept} LoRA adapter checkpoints (adapters and their optimizer only)"))
        return rows
    per_node_ckpt = full_checkpoint_tb_per_node(cfg)
    rows.append(
        (
            "storage",
            "checkpoints",
            f"~{per_node_ckpt:.2f} TB per training node per checkpoint "
            f"(~{FULL_CHECKPOINT_TB_TOTAL:.0f} TB total); {kept} kept = ~{kept * FULL_CHECKPOINT_TB_TOTAL:.0f} TB",
        )
    )
    if cfg.paths.optimizer_state_disk_dir:
        rows.append(
            (
                "storage",
                "optimizer state",
                f"~{optimizer_state_tb_per_node(cfg):.2f} TB per node on node-local "
                f"NVMe at {cfg.paths.optimizer_state_disk_dir}",
            )
        )
    else:
        rows.append(
            ("storage", "optimizer state", f"CPU optimizer: ~{CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE} TB host RAM per node")
        )
    return rows


def print_plan(cfg: BeamConfig, launch, extra_rows: Sequence[tuple[str, str, str]] = (), preemption=None) -> None:
    table = Table(title=f"beam-slurm plan: {cfg.recipe}", show_lines=False)
    table.add_column("section", style="cyan", no_wrap=True)
    table.add_column("item", style="bold")
    table.add_column("value", overflow="fold")  # a long key wraps onto the next line rather than being cut
    previous = None
    for section, item, value in [*plan_rows(cfg, preemption), *extra_rows]:
        table.add_row(section if section != previous else "", item, value)
        previous = section
    console = table_console()
    console.print(table)
    console.print("[bold]SkyRL command[/bold] (run on the head node inside the allocation):", highlight=False)
    console.print(launch.shell(cfg.trainer.python), highlight=False, soft_wrap=True, markup=False)


def build_parser():
    verb = VerbArgs(
        "plan",
        "The resource plan of a recipe, validated, and the exact SkyRL command; nothing is submitted.",
        keys=list(schema_keys()),
    )
    verb.add_argument("--skyrl-overrides", action="store_true", help="print only SkyRL's key=value list")
    verb.add_argument("--json", action="store_true", help="print the plan, the SkyRL command and its env as JSON")
    verb.add_argument(
        "--from",
        dest="history",
        metavar="RUN",
        help="advise from this run's measurements (default: the run of this run name, if it has run)",
    )
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
    if parsed.args.skyrl_overrides:
        sys.stdout.write("".join(o + "\n" for o in launch.overrides))
        return 0
    try:
        measured_history = history(cfg, parsed.args.history)
    except RunNotFound as exc:
        return verb.fail(f"--from {parsed.args.history}: {exc}")
    preemption = read_preemption(cfg.cluster.partition)
    slurm = slurm_check(cfg, parsed.overrides)
    if parsed.args.json:
        print(json_text(plan_json(cfg, launch, preemption, slurm, parsed.overrides, measured_history), default=str))
    else:
        print_plan(cfg, launch, slurm_rows(slurm) + history_rows(measured_history), preemption)
    return 2 if slurm["accepted"] is False or slurm["never_starts"] else 0


def history(cfg: BeamConfig, run: str | None) -> PlanHistory | None:
    """What the run's own attempts measured (`--from RUN`, else this run name's run), each with its source."""
    export_path = resolve_run(run) if run else cfg.paths.export_path
    if not export_path or not run_file(export_path).is_file():
        return None
    m = measured(run_ledger(export_path))
    if not m.attempts:
        return None
    t, c = cfg.trainer, cfg.cluster
    assert c.time_limit is not None  # fill_defaults puts the schema's default back

    def number(value: float | None, default: float, key: str) -> MeasuredValue:
        return {
            "value": float(value if value is not None else default),
            "source": "measured" if value is not None else key,
        }

    step_s = number(m.step_s, step_seconds(cfg)[0], "the recipe's step time")
    save_s = number(m.save_s, recipe_save_seconds(cfg), "the recipe's save estimate")
    bring_up_s = number(m.bring_up_s, t.expected_bringup_s, "trainer.expected_bringup_s")
    model_load_s = number(m.model_load_s, t.expected_model_load_s, "trainer.expected_model_load_s")
    interruptions = number(m.interruptions_per_day, c.interruptions_per_day, "cluster.interruptions_per_day")
    advice = advise_interval(
        save_s=save_s["value"],
        step_s=step_s["value"],
        interruptions_per_day=interruptions["value"],
        configured_steps=cfg.checkpoint.interval,
        max_steps=cfg.max_training_steps,
    )
    limit = time_limit_seconds(c.time_limit)
    reach = (
        max(int((limit - bring_up_s["value"] - model_load_s["value"]) // step_s["value"]), 0)
        if limit and step_s["value"] > 0
        else None
    )
    return {
        "export_path": str(export_path),
        "attempts": m.attempts,
        "allocated_hours": m.allocated_hours,
        "faults": m.faults,
        "step_s": step_s,
        "save_s": save_s,
        "bring_up_s": bring_up_s,
        "model_load_s": model_load_s,
        "interruptions_per_day": interruptions,
        "steps_per_attempt": reach,
        "advised_interval": advice.advised_steps,
        "advised_waste": advice.advised_waste,
        "configured_interval": advice.configured_steps,
        "configured_waste": advice.configured_waste,
    }


def history_rows(h: PlanHistory | None) -> list[tuple[str, str, str]]:
    if h is None:
        return []

    def shown(number: MeasuredValue, unit: str = " s") -> str:
        return f"{number['value']:,.1f}{unit} ({number['source']})"

    reach = f"; one attempt reaches about {h['steps_per_attempt']} steps" if h["steps_per_attempt"] is not None else ""
    return [
        (
            "history",
            "measured in",
            f"{h['export_path']}: {h['attempts']} attempts, {h['allocated_hours']:.2f} h "
            f"of allocation, {h['faults']} ended without a notice",
        ),
        ("history", "bring-up / model load", f"{shown(h['bring_up_s'])} / {shown(h['model_load_s'])}{reach}"),
        ("history", "step / save", f"{shown(h['step_s'])} / {shown(h['save_s'])}"),
        ("history", "interruptions", shown(h["interruptions_per_day"], " per day of allocation")),
        (
            "history",
            "interval advice",
            f"every {h['advised_interval']} steps: {h['advised_waste']:.1%} of GPU "
            f"time to saves and redone steps; configured every {h['configured_interval']}: "
            f"{h['configured_waste']:.1%} (from the numbers above)",
        ),
    ]


def slurm_check(cfg: BeamConfig, overrides: list[str]) -> SlurmCheck:
    """`sbatch --test-only`, then the limits it would wait on for ever; skipped by cluster.ask_slurm_on_submit=false."""
    out: SlurmCheck = {
        "asked": False,
        "accepted": None,
        "answer": "",
        "fix": None,
        "partitions": [],
        "limits_unread": [],
        "never_starts": [],
        "accounting_enforced": None,
    }
    if not cfg.cluster.ask_slurm_on_submit:
        return {**out, "answer": "not asked (cluster.ask_slurm_on_submit=false)"}
    try:
        request = Train(cfg, overrides).render().request
    except StageError as exc:
        return {**out, "answer": f"not asked: {exc}"}
    assert request is not None  # a rendered stage has its sbatch call (only a skipped one has none)
    answer = sbatch_test_only(request)
    if answer.accepted is None:
        return {**out, "answer": f"not asked: Slurm could not be reached ({answer.text})"}
    out["asked"], out["accepted"], out["answer"] = True, answer.accepted, answer.text
    if not answer.accepted:
        out["fix"] = f"change {refusal_setting(answer.text, request)}"
    # Read on a refusal too: "node configuration is not available" does not say it was the partition's MaxNodes.
    found = limits.check_job(limits.job_shape(request))
    out["partitions"] = [
        {
            "name": p.name,
            "max_time_s": p.max_time_s,
            "default_time_s": p.default_time_s,
            "max_nodes": p.max_nodes,
            "total_nodes": p.total_nodes,
            "state": p.state,
            "text": p.describe(),
        }
        for p in found.partitions
    ]
    out["limits_unread"] = list(found.unread)
    out["accounting_enforced"] = found.accounting_enforced
    out["never_starts"] = [{"text": b.text, "fix": f"change {b.setting}"} for b in found.breaches]
    return out


def slurm_rows(check: SlurmCheck) -> list[tuple[str, str, str]]:
    item = "sbatch --test-only"
    if not check["asked"]:
        return [("slurm", item, check["answer"])]
    refused = not check["accepted"]
    rows = [
        ("slurm", item, f"REFUSED: {check['answer']}; {check['fix']}" if refused else f"accepted: {check['answer']}")
    ]
    rows += [("slurm", f"partition {p['name']}", p["text"]) for p in check["partitions"]]
    rows += [("slurm", "limits", f"not read: {text}") for text in check["limits_unread"]]
    rows += [("slurm", "limits", f"NEVER STARTS: {b['text']}; {b['fix']}") for b in check["never_starts"]]
    if not check["never_starts"] and not check["limits_unread"] and not refused:
        rows.append(
            (
                "slurm",
                "limits",
                "within the partition's limits"
                + (
                    " and the QOS's and association's"
                    if check["accounting_enforced"]
                    else " (QOS and association limits are not enforced here)"
                ),
            )
        )
    return rows


def _number(value: float) -> float | None:
    """JSON has no infinity: an unbounded number is null."""
    return value if math.isfinite(value) else None


def _row_objects(rows: list[tuple[str, str, str]]) -> list[PlanRow]:
    """The table's rows as objects; a fix row becomes the `fix` list of the row above it."""
    out: list[PlanRow] = []
    for section, item, text in rows:
        if item.strip() == "fix" and out:
            out[-1]["fix"] = text.split("; or ")
        else:
            out.append({"section": section, "item": item, "text": text})
    return out


def stage_commands(cfg: BeamConfig, overrides: list[str]) -> list[StageCommand]:
    """The sbatch command of each stage `submit` would queue (the container stage only where an image is pulled)."""
    data = [o for o in overrides if override_key(o).startswith("data.")]
    out: list[StageCommand] = []
    for stage in (PrepareData(cfg, data), PullContainer(cfg), Train(cfg, [o for o in overrides if o not in data])):
        not_needed = stage.completed() if isinstance(stage, PullContainer) else ""
        try:
            request = stage.render().request
            assert request is not None  # a rendered stage has its sbatch call (only a skipped one has none)
            command = request.shell()
        except StageError as exc:
            command, not_needed = None, str(exc)
        out.append(
            {
                "stage": stage.stage,
                "command": command,
                "not_needed": not_needed if not_needed.startswith(("not needed", "recipe=")) else None,
            }
        )
    return out


def _profile_json(cfg: BeamConfig) -> PlanProfile | None:
    profile = profile_of(cfg)
    if profile is None:
        return None
    return {
        "name": profile.name,
        "path": profile.path,
        "keys": list(profile.keys),
        "measured": sorted(measured_keys(cfg)),
        "measured_at": cfg.site.measured_at or None,
        "site": {
            "slurm_version": cfg.site.slurm_version or None,
            "signal_early_s": cfg.site.signal_early_s,
            "requeue_hold_s": cfg.site.requeue_hold_s,
            "local_write_gbytes_per_s": cfg.site.local_write_gbytes_per_s,
            "queue_wait_s": cfg.site.queue_wait_s,
        },
    }


def plan_json(
    cfg: BeamConfig, launch, preemption, slurm: SlurmCheck, overrides: list[str], history: PlanHistory | None = None
) -> PlanJson:
    """`plan --json` (PlanJson): the plan, the SkyRL command, what Slurm said (`slurm`) and what the run measured."""
    c, m, b, g, r = cfg.cluster, cfg.megatron, cfg.batch, cfg.generation, cfg.rollout
    assert c.time_limit is not None  # fill_defaults puts the schema's default back
    responses = b.prompts_per_step * b.responses_per_prompt
    size, size_from = checkpoint_bytes_per_node(cfg)
    step, step_from = step_seconds(cfg)
    stop_s, log_copy_s, stop_from = stop_seconds(cfg)
    budget, progress, advice = recipe_budget(cfg), attempt_progress(cfg), recipe_advice(cfg)
    preempt: PlanPreemption = {
        "asked": preemption.reachable,
        "why_not": preemption.why or None,
        "partition": preemption.partition,
        "preemptable": None,
        "mode": None,
        "grace_s": None,
        "user_signal": None,
        "save_fits": None,
    }
    if preemption.reachable:
        qos = c.qos
        preempt["preemptable"] = preemptable = preemption.preemptable(qos)
        preempt["mode"] = mode = preemption.mode(qos) or None
        preempt["grace_s"] = grace_s = preemption.grace_s(qos)
        preempt["user_signal"] = preemption.user_signal
        if preemptable and grace_s > 0 and not (mode or "").startswith("SUSPEND"):
            preempt["save_fits"] = SaveCost.of(cfg).preemption_budget(grace_s).fits
    rows = _row_objects([*plan_rows(cfg, preemption), *slurm_rows(slurm)])
    return {
        "recipe": cfg.recipe,
        "run_name": cfg.run_name,
        "trainer_backend": cfg.trainer.backend,
        "rehearsal": cfg.trainer.backend == "rehearsal",
        "precision": cfg.precision,
        "lora": cfg.is_lora,
        "resources": {
            "nodes": c.nodes,
            "spare_nodes": c.spare_nodes,
            "gpus_per_node": c.gpus_per_node,
            "total_gpus": cfg.total_gpus,
            "training_nodes": cfg.training_nodes,
            "rollout_nodes": cfg.trainer.rollout_nodes,
            "colocated": cfg.trainer.placement_colocated,
            "partition": c.partition,
            "account": c.account,
            "qos": c.qos,
            "time_limit": c.time_limit,
            "time_limit_s": time_limit_seconds(c.time_limit),
            "signal_before_s": c.signal_before_s,
            "grace_s": c.grace_s,
            "max_requeues": c.max_requeues,
            "from_env": env_sources(cfg),
            "constraint": c.constraint,
        },
        "profile": _profile_json(cfg),
        "parallelism": {
            "tensor_parallel": m.tensor_parallel,
            "pipeline_parallel": m.pipeline_parallel,
            "context_parallel": m.context_parallel,
            "expert_parallel": m.expert_parallel,
            "expert_tensor_parallel": m.expert_tensor_parallel,
            "training_gpus": cfg.training_gpus,
            "data_parallel": cfg.data_parallel,
            "vllm_replicas": cfg.num_engines,
            "vllm_tensor_parallel": r.tensor_parallel,
            "vllm_pipeline_parallel": r.pipeline_parallel,
            "vllm_gpus": cfg.num_engines * cfg.gpus_per_engine,
            "executor_backend": cfg.executor_backend,
        },
        "batch": {
            "prompts_per_step": b.prompts_per_step,
            "responses_per_prompt": b.responses_per_prompt,
            "responses_per_step": responses,
            "mini_batches": b.mini_batches,
            "mini_batch_prompts": cfg.mini_batch_prompts,
            "max_training_steps": cfg.max_training_steps,
            "optimizer_updates": b.mini_batches * cfg.max_training_steps,
        },
        "tokens": {
            "max_prompt_tokens": g.max_prompt_tokens,
            "max_response_tokens": g.max_response_tokens,
            "max_tokens_per_step": responses * (g.max_prompt_tokens + g.max_response_tokens),
        },
        "checkpoints": {
            "interval": cfg.checkpoint.interval,
            "kept": checkpoints_kept(cfg),
            "resume_mode": cfg.checkpoint.resume_mode,
            "bytes_per_node": size,
            "bytes_from": size_from,
        },
        "notice": {
            "lead_s": budget.lead_s,
            "step_s": step,
            "step_from": step_from,
            "save_s": _number(budget.save_s),
            "write_gbytes_per_s": c.storage_write_gbytes_per_s,
            "stop_ray_s": stop_s,
            "log_copy_s": log_copy_s,
            "stop_from": stop_from,
            "needed_s": _number(budget.needed_s),
            "save_fits": budget.fits,
            "fits_lead": budget.fits_lead,
            "fits_grace": budget.fits_grace,
            "fix": budget.fixes(bytes_per_node=size, interval_steps=cfg.checkpoint.interval, limit_s=progress.limit_s),
        },
        "attempt": {
            "time_limit_s": progress.limit_s,
            "start_s": progress.start_s,
            "train_s": _number(progress.train_s),
            "steps": _number(progress.steps),
            "finishes_in_one": progress.finishes_in_one,
            "reaches_checkpoint": progress.reaches_checkpoint,
            "stalls": progress.stalls,
            "fix": progress.fixes() if progress.stalls else [],
        },
        "preemption": preempt,
        "interval_advice": {
            "advised_steps": advice.advised_steps,
            "configured_steps": advice.configured_steps,
            "advised_waste": _number(advice.advised_waste),
            "configured_waste": _number(advice.configured_waste),
            "interruptions_per_day": c.interruptions_per_day,
        },
        "slurm": slurm,
        "sbatch": stage_commands(cfg, overrides),
        "skyrl": {
            "module": launch.module,
            "overrides": launch.overrides,
            "env": launch.env,
            "cwd": launch.cwd,
            "command": launch.shell(cfg.trainer.python),
        },
        "findings": [row for row in rows if "fix" in row or row["text"].startswith(("REFUSED", "NEVER STARTS"))],
        "rows": rows,
        "config": dataclasses.asdict(cfg),
        "history": history,
    }
