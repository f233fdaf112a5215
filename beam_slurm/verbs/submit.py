"""`beam-slurm submit`: the stage chain prepare data -> pull container -> train as Slurm jobs, or one chain per point of
a `-m` sweep, returning as soon as everything is queued.

Stages chain with `--dependency` (afterok: a failed stage's dependents stay pending, nothing is cancelled). Complete
stages are skipped; a stage whose earlier job is still queued or running is not queued again (named with its
state; `--queue-anyway` queues a copy); a sweep shares the data and container jobs and is refused (exit 2) on an
invalid point unless `--skip-invalid`. A run whose last job was stopped or hit the no-progress guard resumes.
Every job carries a submission token in its --comment: when sbatch's answer is lost, the job Slurm has is adopted.
Exit 1 when any stage asked for was not queued by this call (each is listed, with why, as "not queued"), or when
everything asked for runs already.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from beam_slurm.config.load import has_sweep, load_config, load_many, to_yaml
from beam_slurm.config.overrides import override_key
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.validation import path_problems, unusable_text_problems
from beam_slurm.config.validation import problems as config_problems
from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, schema_keys
from beam_slurm.core import layout
from beam_slurm.core.atomic_files import write_text
from beam_slurm.core.errors import ConfigError, ConfigProblem
from beam_slurm.core.json_text import json_text
from beam_slurm.core.run_store import RunStore, now, remember_job
from beam_slurm.launch.manifest import record_submission, remember_last
from beam_slurm.launch.run_results import REHEARSAL_RUN
from beam_slurm.launch.stages import PrepareData, PullContainer, StageError, StageJson, StagePlan, Train
from beam_slurm.launch.sweep import expand, rename_run, share_group, slug, sweep_root
from beam_slurm.policy.notice_budget import attempt_progress
from beam_slurm.slurm import limits, scheduler
from beam_slurm.slurm.scheduler import SlurmCommandError
from beam_slurm.slurm.submission import (
    SubmissionUnknown,
    active_jobs_with_prefix,
    job_records,
    refusal_setting,
    sbatch_test_only,
)

STAGES = ("data", "container", "train")


class SubmittedStage(StageJson):
    """One stage of a run: what was queued (or would be, in a dry run), reused or skipped, and why."""

    dependency_type: str | None  # afterok or afterany (--dependency-type): how it waits for the stages before it
    shared_with: str | None  # the sweep point whose job this is, when another point's submission owns it


class SubmittedRun(TypedDict):
    """One run (one sweep point) and its stage chain."""

    run_name: str
    export_path: str
    run_dir: str  # its record's folder (beam_run/)
    rehearsal: bool  # trainer.backend=rehearsal: it checks the plumbing, it does not train
    choices: list[str]  # the sweep point's `key=value` choices (empty outside a sweep)
    wandb_group: str | None
    stages: list[SubmittedStage]


class ProblemJson(TypedDict):
    """One bad setting of an invalid sweep point."""

    key: str  # the dotted key: `megatron.tensor_parallel`
    value: Any  # the value given (or derived)
    fix: str
    problem: str | None  # what is wrong, when the value alone does not say
    env: str | None  # the environment variable the value came from, if it did


class InvalidRun(TypedDict):
    """A sweep point left out (`--skip-invalid`), with every problem it has."""

    choices: list[str]
    label: str
    problems: list[ProblemJson]


class SubmitJson(TypedDict):
    """`submit --json` (also with --dry-run): the runs and their stages as queued, and the sweep points left out."""

    dry_run: bool
    sweep_dir: str | None  # the sweep's folder (`-m`), else null
    runs: list[SubmittedRun]
    invalid: list[InvalidRun]


JSON_OUTPUT = SubmitJson


@dataclass
class RunSpec:
    overrides: list[str]  # Its Hydra overrides
    choices: list[tuple[str, str]] = field(default_factory=list)  # swept (key, value) pairs
    # The loaded config (run name and paths already per point); None when it did not compose
    cfg: BeamConfig | None = None
    problems: list[ConfigProblem] = field(default_factory=list)  # Why this run is invalid (empty = valid)
    base_name: str = ""  # The run name before a sweep point's suffix was added
    plans: list[StagePlan] = field(default_factory=list)  # Its stage plans, in chain order

    @property
    def label(self) -> str:
        if self.cfg is not None and self.cfg.run_name is not None:  # (fill_defaults names every run)
            return self.cfg.run_name
        return " ".join(f"{k}={v}" for k, v in self.choices) or " ".join(self.overrides) or "(defaults)"


def build_parser():
    verb = VerbArgs("submit", __doc__.split("\n\n")[0], keys=list(schema_keys()))
    verb.add_argument("-m", "--multirun", action="store_true", help="sweep: key=a,b expands to one run per value")
    verb.add_argument("--dry-run", action="store_true", help="render and print everything, submit and write nothing")
    verb.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of data,container,train")
    verb.add_argument(
        "--dependency-type",
        default="afterok",
        choices=("afterok", "afterany"),
        help="how a stage waits for the one before it (default afterok)",
    )
    verb.add_argument("--skip-invalid", action="store_true", help="submit a sweep's valid points, list the others")
    verb.add_argument("--force", action="store_true", help="rebuild the data even when it is up to date")
    verb.add_argument(
        "--queue-anyway",
        action="store_true",
        help="queue a copy of a stage whose job is still active",
    )
    verb.add_argument("--json", action="store_true", help="print what was queued (job ids, sbatch commands) as JSON")
    return verb


def submission_json(runs: list[RunSpec], invalid: list[RunSpec], dry_run: bool, sweep_dir: Path | None) -> SubmitJson:
    """Job ids as `sbatch --parsable` gives them; a stage shared by a sweep's points names the run that owns it."""
    owner: dict[int, str] = {}
    out: list[SubmittedRun] = []
    for run in runs:
        assert run.cfg is not None  # only valid runs are submitted
        assert run.cfg.run_name is not None and run.cfg.paths.export_path is not None  # fill_defaults sets them
        stages: list[SubmittedStage] = []
        for plan in run.plans:
            first = owner.setdefault(id(plan), run.cfg.run_name)
            stages.append(
                {
                    **plan.to_json(),
                    "dependency_type": plan.request.dependency_type if plan.request else None,
                    "shared_with": first if first != run.cfg.run_name else None,
                }
            )
        out.append(
            {
                "run_name": run.cfg.run_name,
                "export_path": str(run.cfg.paths.export_path),
                "run_dir": str(layout.run_dir(run.cfg.paths.export_path)),
                "rehearsal": run.cfg.trainer.backend == "rehearsal",
                "choices": [f"{k}={v}" for k, v in run.choices],
                "wandb_group": run.cfg.trainer.wandb_group or None,
                "stages": stages,
            }
        )
    return {
        "dry_run": dry_run,
        "sweep_dir": str(sweep_dir) if sweep_dir else None,
        "runs": out,
        "invalid": [
            {
                "choices": [f"{k}={v}" for k, v in r.choices],
                "label": r.label,
                "problems": [cast(ProblemJson, dataclasses.asdict(p)) for p in r.problems],  # its fields, its keys
            }
            for r in invalid
        ],
    }


def _fail(problems: list[str]) -> int:
    print("beam-slurm submit: nothing was submitted", file=sys.stderr)
    for p in problems:
        print(f"  - {p}", file=sys.stderr)
    return 2


def build_runs(overrides: list[str], multirun: bool, stages: tuple[str, ...] | list[str] = STAGES) -> list[RunSpec]:
    """Load and validate every run (every sweep point); raises ConfigError for a bad override outside a sweep."""
    swept = [] if multirun else has_sweep(overrides)
    if swept:
        raise ConfigError(
            [
                ConfigProblem(
                    s.split("=", 1)[0],
                    s,
                    "is a sweep: add -m to submit one run per value, or quote a literal comma (key='a,b')",
                )
                for s in swept
            ]
        )
    home = os.environ.get("HOME", str(Path.home()))
    runs = []
    combos = expand(overrides)
    # One composition per distinct recipe (config group) choice; each point's values applied to a copy.
    for combo, loaded in zip(combos, load_many([c.overrides for c in combos]), strict=False):
        run = RunSpec(combo.overrides, combo.choices)
        runs.append(run)
        if isinstance(loaded, ConfigError):
            run.problems = loaded.problems
            continue
        assert loaded.run_name is not None  # fill_defaults names every run
        run.cfg, run.base_name = loaded, loaded.run_name
        if combo.choices:
            rename_run(run.cfg, slug(combo.choices), home=home)
        run.problems = config_problems(run.cfg)
        if "train" in stages:
            run.problems += path_problems(run.cfg, produced=[s for s in stages if s != "train"])
            run.problems += Train(run.cfg, run.overrides).passing_on_problems()
            if not unusable_text_problems(run.cfg):  # it reads the run's folders
                run.problems += stalled_attempt_problems(run.cfg)
    seen: set[str | None] = set()
    for run in (r for r in runs if r.cfg is not None):
        assert run.cfg is not None  # (the filter above)
        if run.cfg.run_name in seen:
            run.problems.append(
                ConfigProblem(
                    "run_name", run.cfg.run_name, "two sweep points have the same run name; remove the repeated value"
                )
            )
        seen.add(run.cfg.run_name)
    return runs


def ask_slurm(runs: list[RunSpec], out=None) -> list[str]:
    """Refusals and never-met limits, each with its setting; nodes down or drained only warn (they may come back)."""
    out = out or sys.stderr
    refused: list[str] = []
    asked = set()
    for run in runs:
        assert run.cfg is not None  # only valid runs are submitted
        for plan in run.plans:
            # One question per job shape: a sweep's points differ in their names and settings, not in what Slurm checks.
            shape = (
                None
                if plan.request is None
                else (
                    plan.request.script,
                    tuple(
                        o for o in plan.request.options if not o.startswith(("--job-name=", "--output=", "--error="))
                    ),
                )
            )
            if shape is None or shape in asked:
                continue
            assert plan.request is not None  # (shape is None without one)
            asked.add(shape)
            answer = sbatch_test_only(plan.request)
            if answer.accepted is None:
                print(
                    f"beam-slurm submit: Slurm could not be asked ({answer.text}); the jobs were not tested "
                    "(cluster.ask_slurm_on_submit=false skips this)",
                    file=out,
                )
                return refused
            what = f"the {plan.stage} job of {run.cfg.run_name}"
            if answer.accepted:
                # test-only passes what only waits for ever (limits it does not check at submit): read them too.
                found = limits.check_job(limits.job_shape(plan.request))
                refused += [f"Slurm would never start {what}: {breach}" for breach in found.breaches]
                continue
            if "node configuration is not available" in answer.text and _some_nodes_unusable(run.cfg.cluster.partition):
                print(
                    f"beam-slurm submit: warning: Slurm cannot give {what} its nodes now ({answer.text}) while some "
                    "of the partition's nodes are down or drained; it waits for them",
                    file=out,
                )
                continue
            refused.append(f"Slurm refuses {what}: {answer.text}; change {refusal_setting(answer.text, plan.request)}")
    return refused


def _some_nodes_unusable(partition: str | None) -> bool:
    try:
        return len(scheduler.partition_node_states(partition or "")) > len(
            scheduler.usable_partition_nodes(partition or "")
        )
    except SlurmCommandError:
        return False


def stalled_attempt_problems(cfg: BeamConfig) -> list[ConfigProblem]:
    """An attempt that can reach no checkpoint burns its GPUs and requeues: refused unless allow_no_checkpoint."""
    if cfg.cluster.allow_no_checkpoint:
        return []
    progress = attempt_progress(cfg)
    if not progress.stalls:
        return []
    return [
        ConfigProblem(
            "cluster.time_limit",
            cfg.cluster.time_limit,
            f"an attempt cannot reach a checkpoint ({progress.steps} step(s) of {progress.step_s:,.0f} s "
            f"before the notice, the first checkpoint at step {progress.interval}, no save on notice "
            f"fits): {'; or '.join(progress.fixes())}; or cluster.allow_no_checkpoint=true to submit "
            "it anyway",
        )
    ]


def resume_stopped(runs: list[RunSpec], out=None) -> None:
    """Resume each run whose last training job ended resumable from its latest checkpoint, unless a mode was chosen."""
    for run in runs:
        if run.cfg is None or any(
            override_key(o) in ("checkpoint.resume_mode", "checkpoint.resume_path") for o in run.overrides
        ):
            continue
        assert run.cfg.paths.export_path is not None and run.cfg.paths.ckpt_path is not None  # fill_defaults sets them
        job = RunStore(run.cfg.paths.export_path).read().resumable_job()
        step = layout.latest_checkpoint_step(run.cfg.paths.ckpt_path)
        if job is None or step is None:
            continue
        run.overrides = [*run.overrides, "checkpoint.resume_mode=latest", "checkpoint.resume_path=null"]
        run.cfg.checkpoint.resume_mode, run.cfg.checkpoint.resume_path = "latest", None
        print(
            f"run {run.cfg.run_name}: job {job.job_id} ended {job.outcome} "
            f"({job.outcome_reason}); the new training job resumes from step {step}",
            file=out or sys.stdout,
        )


def _earlier_jobs(runs: list[RunSpec]) -> dict[str, list[str]]:
    """identity -> job ids earlier submissions of these runs gave that stage (newest first)."""
    found: dict[str, list[str]] = {}
    for run in runs:
        assert run.cfg is not None and run.cfg.paths.export_path is not None  # a valid run, its paths filled
        for submission in reversed(RunStore(run.cfg.paths.export_path).read().submissions):
            for entry in submission.stages:
                if entry.job_id and entry.identity:
                    found.setdefault(entry.identity, []).append(str(entry.job_id))
    return found


def plan_stages(
    runs: list[RunSpec], stages: list[str], data_overrides: list[str], force: bool = False, queue_anyway: bool = False
) -> None:
    """Skip (complete) or reuse (earlier job active, unless queue_anyway); runs sharing a data folder or image share
    one plan (one job). An earlier job is found in the run's record or, where the record lacks it (a lost answer),
    by its submission token in squeue."""
    shared: dict[str, StagePlan] = {}
    for run in runs:
        assert run.cfg is not None  # only valid runs are submitted
        run.plans = []
        for name in stages:
            stage: PrepareData | PullContainer | Train
            if name == "data":
                stage = PrepareData(run.cfg, data_overrides, force=force)
            elif name == "container":
                stage = PullContainer(run.cfg)
            else:
                stage = Train(run.cfg, run.overrides)
            identity = stage.identity()
            if identity in shared:
                run.plans.append(shared[identity])
                continue
            blocked = stage.blocked() if isinstance(stage, PrepareData) else ""
            if blocked:
                raise StageError(f"data stage of {run.cfg.run_name}: {blocked}")
            reason = stage.completed()
            plan = stage.render()
            if reason:
                plan.skip_reason, plan.request = reason, None
            shared[identity] = plan
            run.plans.append(plan)

    if queue_anyway:
        return
    earlier = _earlier_jobs(runs)
    open_plans = [p for p in shared.values() if not p.skip_reason]
    wanted = {p.identity: earlier[p.identity] for p in open_plans if p.identity in earlier}
    try:
        records = job_records([j for ids in wanted.values() for j in ids]) if wanted else {}
        by_token = active_jobs_with_prefix(p.token_prefix for p in open_plans)
    except SlurmCommandError:
        return  # no scheduler to ask (e.g. a dry run on a laptop): submit as if nothing were queued
    for plan in open_plans:
        active = [(j, records[j].state) for j in wanted.get(plan.identity, []) if j in records and records[j].active]
        active += sorted(by_token.get(plan.token_prefix, {}).items(), key=lambda item: (len(item[0]), item[0]))
        if active:
            job_id, state = active[0]
            plan.reused_job_id, plan.reused_state = job_id, state
            plan.skip_reason = f"already {state.lower()} as job {job_id}"


def _chain_dependencies(run: RunSpec) -> dict[int, list[str]]:
    """Which job ids each stage waits for: data and container none, train both (when they have jobs)."""
    out: dict[int, list[str]] = {}
    before: list[str] = []
    for index, plan in enumerate(run.plans):
        out[index] = list(before) if plan.stage == "train" else []
        if plan.job_id or plan.reused_job_id:
            before.append(plan.job_id or plan.reused_job_id)
    return out


def submit_runs(runs: list[RunSpec], dependency_type: str, notify=None) -> None:
    """Submit each run's chain in order (a shared stage once). The first stage not queued (Slurm refused it, or its
    answer was lost and Slurm did not say in time) stops the submission: it and every stage after it are marked
    `not_queued` with why; what was queued stays queued."""
    for plan in (p for run in runs for p in run.plans if p.reused_job_id and not p.job_id):
        plan.job_id = plan.reused_job_id
    stopped = ""
    for run in runs:
        assert run.cfg is not None  # only valid runs are submitted
        for index, plan in enumerate(run.plans):
            if plan.skip_reason or plan.job_id or plan.not_queued:
                continue
            if stopped:
                plan.not_queued = stopped
                continue
            say = (lambda line, r=run, p=plan: notify(f"run {r.cfg.run_name} {p.stage}: {line}")) if notify else None
            try:
                plan.submit(_chain_dependencies(run)[index], dependency_type, notify=say)
            except (SlurmCommandError, StageError, OSError) as exc:
                plan.depends_on = []
                if isinstance(exc, SubmissionUnknown):  # a later `submit` looks for the token in squeue
                    plan.not_queued = f"Slurm did not answer: {exc} (token {plan.token})"
                elif isinstance(exc, SlurmCommandError):
                    plan.not_queued = f"Slurm refused it: {exc}"
                else:  # its log folder could not be made, or the stage could not be rendered
                    plan.not_queued = f"could not be submitted: {exc}"
                stopped = f"submission stopped after the {plan.stage} stage of {run.cfg.run_name} was not queued"


def unqueued_lines(runs: list[RunSpec]) -> tuple[list[str], list[str]]:
    """(each stage this call did not queue, with why: not queued, or found queued already; each stage it queued)."""
    seen: set[int] = set()
    missing, queued = [], []
    for run in runs:
        assert run.cfg is not None  # only valid runs are submitted
        for plan in run.plans:
            if id(plan) in seen:
                continue
            seen.add(id(plan))
            where = f"run {run.cfg.run_name} {plan.stage}"
            if plan.not_queued:
                missing.append(f"{where}: not queued: {plan.not_queued}")
            elif plan.reused_job_id:
                missing.append(
                    f"{where}: not queued again: job {plan.reused_job_id} is {plan.reused_state} "
                    "(queued earlier); --queue-anyway queues another copy"
                )
            elif plan.job_id:
                queued.append(f"{where}: queued as job {plan.job_id}")
    return missing, queued


def exit_status(missing: list[str], queued: list[str]) -> int:
    """1 when a stage asked for was not queued, or when everything asked for runs already (a second `submit`); a
    stage found running that this call's new jobs depend on is only said (0)."""
    failed = any(": not queued: " in line for line in missing)
    return 1 if failed or (missing and not queued) else 0


def _print_runs(runs: list[RunSpec], dry_run: bool, out=None) -> None:
    out = out or sys.stdout
    first_run_of: dict[int, str] = {}
    for run in runs:
        cfg = run.cfg
        assert cfg is not None and cfg.run_name is not None  # a valid run, named by fill_defaults
        print(f"run {cfg.run_name}  ({cfg.paths.export_path}/beam_run)", file=out)
        if cfg.trainer.backend == "rehearsal":
            print(f"  {REHEARSAL_RUN}", file=out)
        for index, plan in enumerate(run.plans):
            owner = first_run_of.setdefault(id(plan), cfg.run_name)
            if owner != cfg.run_name:
                what = f"job {plan.job_id}" if plan.job_id else ("skipped" if plan.skip_reason else "one job")
                print(f"  {plan.stage:<10} {what}, shared with run {owner}", file=out)
            elif plan.not_queued:
                print(f"  {plan.stage:<10} not queued: {plan.not_queued}", file=out)
            elif plan.skip_reason and not plan.job_id:
                print(f"  {plan.stage:<10} skipped    {plan.skip_reason}", file=out)
            elif plan.job_id and plan.job_id == plan.reused_job_id:
                print(f"  {plan.stage:<10} job {plan.job_id:<7} {plan.skip_reason}; not submitted again", file=out)
            elif dry_run:
                assert plan.request is not None  # neither skipped nor submitted: it has its sbatch call
                before = [p.stage for p in run.plans[:index] if p.job_id or p.reused_job_id or not p.skip_reason]
                note = (
                    f" (after {'+'.join(before)}, {plan.request.dependency_type})"
                    if plan.stage == "train" and before
                    else ""
                )
                print(f"  {plan.stage:<10} would submit{note}: {plan.request.shell()}", file=out)
            else:
                assert plan.request is not None  # submitted
                deps = (
                    f"  waits for {'+'.join(plan.depends_on)} ({plan.request.dependency_type})"
                    if plan.depends_on
                    else ""
                )
                print(f"  {plan.stage:<10} job {plan.job_id:<7} submitted{deps}", file=out)


def _write_records(
    runs: list[RunSpec], invalid: list[RunSpec], args, data_overrides: list[str], sweep_dir: Path | None
) -> None:
    for run in runs:
        assert run.cfg is not None and run.cfg.paths.export_path is not None  # a valid run, its paths filled
        for plan in (p for p in run.plans if p.stage == "train" and p.job_id):
            remember_job(plan.job_id, run.cfg.paths.export_path)
        record_submission(
            RunStore(run.cfg.paths.export_path),
            run.cfg,
            overrides=run.overrides,
            data_overrides=data_overrides,
            plans=run.plans,
            dependency_type=args.dependency_type,
            sweep_dir=str(sweep_dir) if sweep_dir else None,
            config_yaml=to_yaml(run.cfg),
        )
    if sweep_dir is not None:
        record = {
            "created_at": now(),
            "overrides": args.overrides,
            "stages": args.stages,
            "runs": [
                {
                    "run_name": r.cfg.run_name,
                    "choices": [f"{k}={v}" for k, v in r.choices],
                    "export_path": str(r.cfg.paths.export_path),
                    "ckpt_path": str(r.cfg.paths.ckpt_path),
                    "run_dir": f"{r.cfg.paths.export_path}/beam_run",
                }
                for r in runs
                if r.cfg is not None  # all of them (asserted above)
            ],
            "invalid": [
                {"choices": [f"{k}={v}" for k, v in r.choices], "problems": [str(p) for p in r.problems]}
                for r in invalid
            ],
        }
        write_text(sweep_dir / layout.SWEEP_FILE, json.dumps(record, indent=2) + "\n")
        remember_last(sweep_dir)
    elif runs:
        first = runs[0].cfg
        assert first is not None and first.paths.export_path is not None  # a valid run, its paths filled
        remember_last(layout.run_dir(first.paths.export_path))


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        parsed = verb.parse(argv)
    except VerbUsageError as exc:
        return verb.fail(exc)
    args = parsed.args
    args.overrides = parsed.overrides
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if not stages or not set(stages) <= set(STAGES):
        return _fail([f"--stages {args.stages!r}: use a comma-separated subset of {','.join(STAGES)}"])
    stages = [s for s in STAGES if s in stages]  # chain order, whatever order was typed

    data_overrides = [o for o in args.overrides if o.split("=", 1)[0].lstrip("+").startswith("data.")]
    overrides = [o for o in args.overrides if o not in data_overrides]
    try:
        runs = build_runs(overrides, args.multirun, stages)
    except ConfigError as exc:
        return verb.config_failed(exc, what="; nothing was submitted")
    problems = _data_problems(data_overrides) if "data" in stages else []
    if problems:
        return _fail(problems)

    invalid = [r for r in runs if r.problems]
    valid = [r for r in runs if not r.problems]
    if invalid:
        out = sys.stderr
        print(f"beam-slurm submit: {len(invalid)} of {len(runs)} run{'s' if len(runs) != 1 else ''} invalid:", file=out)
        for run in invalid:
            where = " ".join(f"{k}={v}" for k, v in run.choices) if run.choices else run.label
            print(f"  {where}:", file=out)
            for p in run.problems:
                print(f"    - {p}", file=out)
        if not args.skip_invalid or not valid:
            hint = "" if not args.multirun or not valid else " (add --skip-invalid to submit the valid ones)"
            print(f"beam-slurm submit: nothing was submitted{hint}", file=out)
            return 2

    if "train" in stages:
        resume_stopped(valid, out=sys.stderr if args.json else None)
    sweep_dir = None
    if args.multirun:
        sweep_dir = (
            sweep_root([str(r.cfg.paths.export_path) for r in valid if r.cfg is not None])  # (all valid runs have one)
            / layout.SWEEPS_DIRNAME
            / f"{valid[0].base_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        for run in valid:
            assert run.cfg is not None  # only valid runs are submitted
            run.overrides = share_group(run.cfg, run.overrides, sweep_dir.name)
    try:
        plan_stages(valid, stages, data_overrides, args.force, args.queue_anyway)
    except StageError as exc:
        return _fail([str(exc)])

    for plan in (p for run in valid for p in run.plans if p.request is not None):
        assert plan.request is not None  # (the filter above)
        plan.request.dependency_type = args.dependency_type
    if valid and valid[0].cfg is not None and valid[0].cfg.cluster.ask_slurm_on_submit:
        refused = ask_slurm(valid)
        if refused:
            return _fail(refused)

    if args.dry_run:
        if args.json:
            print(json_text(submission_json(valid, invalid, True, sweep_dir), default=str))
            return 0
        _print_runs(valid, dry_run=True)
        print(f"dry run: nothing submitted or written{f' (sweep folder would be {sweep_dir})' if sweep_dir else ''}")
        return 0

    submit_runs(valid, args.dependency_type, notify=lambda line: print(f"beam-slurm submit: {line}", file=sys.stderr))
    _write_records(valid, invalid, args, data_overrides, sweep_dir)
    missing, queued = unqueued_lines(valid)
    if missing:
        print(f"beam-slurm submit: {len(missing)} stage(s) not queued by this call:", file=sys.stderr)
        for line in missing + queued:
            print(f"  {line}", file=sys.stderr)
        if queued:
            print("beam-slurm submit: what was queued stays queued; nothing was cancelled", file=sys.stderr)
    status = exit_status(missing, queued)
    if args.json:
        print(json_text(submission_json(valid, invalid, False, sweep_dir), default=str))
        return status
    _print_runs(valid, dry_run=False)
    if sweep_dir is not None:
        print(f"sweep {sweep_dir}  ({len(valid)} runs{f', {len(invalid)} invalid skipped' if invalid else ''})")
    return status


def _data_problems(data_overrides: list[str]) -> list[str]:
    """Check the data stage's settings now, so a typo fails before anything is queued."""
    problems = [
        f"{o}: data settings cannot be swept (one data folder serves every run)" for o in has_sweep(data_overrides)
    ]
    if problems:
        return problems
    if any(o.split("=", 1)[0].lstrip("+") == "data.out_dir" for o in data_overrides):
        return [
            "data.out_dir: the data stage writes to paths.data_dir (DATA_DIR), which training reads; set that instead"
        ]
    try:  # the data section of the same schema
        cfg = load_config(data_overrides, validate=False)
    except ConfigError as exc:
        return [str(p) for p in exc.problems]
    return cfg.data.problems()
