"""`beam-slurm evaluate RUN | SWEEP | --checkpoint DIR [-m] [--wait] [key=value ...]`: AIME evaluations of checkpoints.

One task per (checkpoint x dataset x sweep point), the finished ones skipped, the rest submitted as one Slurm job
array (`beam_slurm.launch.eval_array`). In the evaluation job (`stage_main`: sbatch/eval_aime.sh, a task across
nodes), or with --server or --checkpoint-list: one checkpoint in this process, results in
``<export_path>/beam_evals/global_step_N/`` or --out (layout: `beam_slurm.jobs.evaluation.resumable`).
Inputs are checked before a model is loaded or a job submitted; bad input exits 2."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table
from submitit.core.utils import FailedJobError

from beam_slurm.config.load import has_sweep
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.verb_args import table_console
from beam_slurm.core.errors import UserError
from beam_slurm.core.layout import evaluation_dir
from beam_slurm.core.logs import installed
from beam_slurm.jobs.evaluation.checkpoints import resolve_checkpoint, step_of
from beam_slurm.jobs.evaluation.generate import ClientSettings, EngineSettings, SamplingSettings
from beam_slurm.jobs.evaluation.grading_pool import GradingLimits
from beam_slurm.jobs.evaluation.metrics import PASS_AT
from beam_slurm.jobs.evaluation.problems import DatasetError, read_problems
from beam_slurm.jobs.evaluation.results import finished_metrics
from beam_slurm.jobs.evaluation.resumable import task_finished
from beam_slurm.launch import eval_array as array
from beam_slurm.launch import sweep
from beam_slurm.launch.chain import ChainSettings, complete_checkpoints
from beam_slurm.launch.eval_array import prepare
from beam_slurm.launch.eval_request import UsageError, build_parser, data_files
from beam_slurm.launch.runs import RunNotFound, resolve_runs
from beam_slurm.slurm import outage
from beam_slurm.slurm.scheduler import SlurmUnreachable, allocation_from_env, srun_per_node
from beam_slurm.slurm.submission import SubmissionUnknown

logger = logging.getLogger(__spec__.name)  # its package name under `python -m` too (__name__ is "__main__")


def _check_data_sources(files: list[str], limit: int | None) -> None:
    """Every file readable, and each data_source in one file only (metrics are keyed by it)."""
    source_of: dict[str, str] = {}
    for name in files:
        path = Path(name).expanduser().resolve()
        for source in {p.data_source for p in read_problems(path, limit)}:
            if source_of.setdefault(source, str(path)) != str(path):
                raise DatasetError(
                    f"--data: {path} and {source_of[source]} both hold data_source {source!r}; their "
                    "metrics would mix. Pass each benchmark once"
                )


def _resolve_out(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out).expanduser().resolve()
    step, run_root = step_of(Path(args.checkpoint).expanduser().resolve()) if args.checkpoint else (None, None)
    if step is None:
        raise UsageError(
            "--out is required: the checkpoint is not inside a run's global_step_N directory, so there "
            "is no default <export_path>/beam_evals/global_step_N/"
        )
    assert run_root is not None  # step_of finds both or neither
    return evaluation_dir(run_root, step)


def _checkpoint_from_list(args: argparse.Namespace) -> str:
    if args.checkpoint:
        raise UsageError("pass either --checkpoint or --checkpoint-list, not both")
    try:
        lines = [line.strip() for line in Path(args.checkpoint_list).read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise UsageError(f"--checkpoint-list: cannot read {args.checkpoint_list} ({exc})") from exc
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "")
    if not task.isdigit() or int(task) >= len(lines):
        raise UsageError(
            f"--checkpoint-list needs SLURM_ARRAY_TASK_ID between 0 and {len(lines) - 1} (got {task!r}); "
            f"submit with sbatch --array=0-{len(lines) - 1}"
        )
    return lines[int(task)]


def _summary_lines(metrics: dict[str, dict[str, Any]]) -> list[str]:
    keys = ("avg@k", "pass@1", "pass@2", "pass@4", "pass@8", "maj@k")
    return [
        f"  {source}: k={entry.get('k')}  "
        + "  ".join(f"{key}={entry[key]:.4f}" for key in keys if key in entry)
        + f"  timeouts={entry.get('timeouts', 0)}"
        for source, entry in sorted(metrics.items())
    ]


def _split_target(verb, argv: list[str]) -> tuple[str | None, list[str]]:
    """The positional RUN | SWEEP (the first bare word that is neither a flag's value nor a key=value)."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word.startswith("-"):
            action = verb.option(word)
            index += 2 if action is not None and action.nargs != 0 and "=" not in word else 1
            continue
        if "=" not in word and not word.startswith("~"):
            return word, argv[:index] + argv[index + 1 :]
        index += 1
    return None, argv


def _targets(args: argparse.Namespace, target: str | None, cfg: BeamConfig) -> list[tuple[str, None, Path]]:
    """(checkpoint, None, evaluation folder) of --checkpoint, or of every complete HF export of a run or sweep."""
    if args.checkpoint:
        if target:
            raise UsageError(
                f"unexpected argument {target!r}: settings are key=value, and a run or sweep is "
                "evaluated without --checkpoint"
            )
        resolve_checkpoint(args.checkpoint, args.base_model)  # a bad checkpoint fails here
        return [(str(Path(args.checkpoint).expanduser().resolve()), None, _resolve_out(args))]
    if not target:
        raise UsageError("what to evaluate: a run (folder, name or job id), a sweep folder, or --checkpoint DIR")
    exports = _run_exports(target, args.exports_root)
    found = [
        (str(path), None, evaluation_dir(export, step))
        for export in exports
        for step, path in complete_checkpoints(ChainSettings(run_dir=export, settle_s=cfg.eval.chain_settle_s))
    ]
    if not found:
        raise UsageError(
            f"{target}: no complete global_step_N export under {', '.join(map(str, exports))} "
            "(the training job writes them every checkpoint.hf_save_interval steps)"
        )
    if args.out and len(found) > 1:
        raise UsageError(f"--out takes one checkpoint; {target} has {len(found)}: leave --out out")
    return [(found[0][0], None, Path(args.out).expanduser().resolve())] if args.out else found


def _run_exports(target: str, exports_root: str | None) -> list[Path]:
    """Export paths of a sweep folder's runs, or of the one run `target` names (beam_slurm.launch.runs)."""
    try:
        return [run.export_path for run in resolve_runs(target, exports_root)]
    except RunNotFound as exc:
        if Path(target).expanduser().is_dir():  # an export folder without a run record (a run trained by hand)
            return [Path(target).expanduser()]
        raise UsageError(str(exc)) from None


def _points(parsed, multirun: bool, load) -> list[tuple[list[str], BeamConfig]]:
    """(overrides, recipe) of every sweep point: `-m` expands key=a,b as `submit -m` does (Hydra's grammar)."""
    overrides = list(parsed.overrides)
    swept = has_sweep(overrides)
    if swept and not multirun:
        raise UsageError(f"{', '.join(swept)}: a sweep needs -m (beam-slurm evaluate -m ...)")
    combinations = sweep.expand(overrides) if multirun else [sweep.Combination(overrides)]
    return [(c.overrides, load(c.overrides)) for c in combinations]


def _table(results: dict[str, dict], title: str) -> None:
    table = Table(title=title)
    entries = [(folder, entry) for folder, metrics in sorted(results.items()) for entry in metrics.values()]
    levels = [j for j in PASS_AT if any(f"pass@{j}" in e for _, e in entries)]
    for column in ("evaluation", "dataset", "k", "avg@k", "95% interval", *(f"pass@{j}" for j in levels), "maj@k"):
        table.add_column(column, justify="left" if column in ("evaluation", "dataset") else "right")
    for folder, entry in entries:
        low, high = entry.get("avg@k_ci95", [float("nan")] * 2)
        table.add_row(
            str(Path(folder).parent.parent.name),
            str(entry.get("dataset")),
            str(entry["k"]),
            f"{entry['avg@k']:.4f}",
            f"[{low:.3f}, {high:.3f}]",
            *(f"{entry[f'pass@{j}']:.4f}" if f"pass@{j}" in entry else "-" for j in levels),
            f"{entry['maj@k']:.4f}",
        )
    table_console().print(table)


def main(argv: list[str] | None = None, *, in_job: bool = False) -> int:
    """`beam-slurm evaluate`; `in_job` (the evaluation job's own call, `stage_main`): evaluate one checkpoint in this
    process instead of submitting."""
    verb = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)

    # 1. Everything that can be checked without a model, so a bad job fails in seconds with status 2.
    try:
        verb.refuse_old_spellings(argv)  # before the target is picked out: `--k 4` would make `4` the target
        target, argv = _split_target(verb, argv)
        parsed = verb.parse(argv)
        args = parsed.args
        here = in_job or bool(args.server) or bool(args.checkpoint_list) or args.check
        if args.served_model and not args.server:
            raise UsageError("--served-model only applies with --server")
        points = _points(
            parsed, args.multirun, lambda overrides: verb.load(dataclasses.replace(parsed, overrides=overrides))
        )
        for _, cfg in points:
            if cfg.eval.limit is not None and cfg.eval.limit < 1:
                raise UsageError(f"eval.limit must be at least 1 (got {cfg.eval.limit})")
            GradingLimits.from_settings(cfg.grade)  # each settings object checks its values as it is made
            SamplingSettings.from_config(cfg)
            if args.server:
                ClientSettings.from_config(cfg, args.server, args.served_model)
            else:
                EngineSettings.from_config(cfg, ray_cluster=bool(os.environ.get("RAY_ADDRESS")))
        if here:
            if target or args.multirun or args.wait:
                raise UsageError(
                    "the evaluation job (and --server, --checkpoint-list, --check) evaluates one "
                    "checkpoint in this process: no run, sweep, -m or --wait"
                )
            if args.checkpoint_list:
                args.checkpoint = _checkpoint_from_list(args)
            if not args.server and not args.checkpoint:
                raise UsageError("--checkpoint is required (or --server URL to use an already running server)")
            if not args.server:
                resolve_checkpoint(args.checkpoint, args.base_model)  # a bad checkpoint fails here
            targets: Sequence[tuple[str | None, None, Path]] = [
                (
                    str(Path(args.checkpoint).expanduser().resolve()) if args.checkpoint else None,
                    None,
                    _resolve_out(args),
                )
            ]
        else:
            targets = _targets(args, target, points[0][1])
        for _, _, out_dir in targets:
            if out_dir.exists() and not out_dir.is_dir():
                raise UsageError(f"--out: {out_dir} exists and is not a directory")
        if here:
            overrides, cfg = points[0]
            specs = [
                array.TaskSpec(
                    checkpoint=targets[0][0],
                    data_file=name,
                    out_dir=str(targets[0][2]),
                    ks=(cfg.eval.responses_per_problem,),
                    overrides=tuple(overrides),
                    base_model=args.base_model,
                    server=args.server,
                    served_model=args.served_model,
                )
                for name in data_files(args.data, cfg)
            ]
            prepared = [array.prepare(spec) for spec in specs]
            _check_data_sources([p.data["path"] for p in prepared], cfg.eval.limit)
        else:
            for _, cfg in points:
                _check_data_sources(data_files(args.data, cfg), cfg.eval.limit)
            found = array.plan(
                points, targets, lambda cfg: data_files(args.data, cfg), force=args.force, base_model=args.base_model
            )
    except UserError as exc:  # bad input of any kind (usage, checkpoint, dataset, settings): exit 2
        return verb.report(exc)
    except SlurmUnreachable as exc:  # asking whether an evaluation is queued already
        return verb.fail(f"could not ask which evaluations are queued already, nothing submitted: {exc}", status=1)

    with installed("beam_slurm", stream="stdout"):  # progress goes to the job log as it happens
        if args.check:
            logger.info(
                f"evaluate: inputs OK: {sum(len(p.problems) for p in prepared)} problems from {len(prepared)} file(s), "
                f"k={prepared[0].sampling.n}, on {args.server or targets[0][0]}, results in {targets[0][2]}"
            )
            return 0
        if here:
            # 2. In this process (inside an allocation, or with --server): resumable generation, grading, results.
            if args.force:
                for p in prepared:
                    for key in p.keys:
                        shutil.rmtree(p.out_dir / key.task_dir, ignore_errors=True)
                    shutil.rmtree(p.store.folder, ignore_errors=True)
            if all(task_finished(p.out_dir, key) for p in prepared for key in p.keys):
                logger.info(f"evaluate: {targets[0][2]} already holds this evaluation; reusing it (--force to redo)")
            else:
                array.run_tasks(specs)
            logger.info(f"evaluate: results in {targets[0][2]}")
            for line in _summary_lines(finished_metrics(targets[0][2]) or {}):
                logger.info(line)
            return 0

        # 3. As one job array through submitit: the unfinished tasks only.
        for folder in found.finished:
            logger.info(f"evaluate: finished already, not submitted: {folder}")
        for line in found.active:
            logger.info(f"evaluate: queued or running already, not submitted: {line}")
        if not found.to_submit:
            logger.info("evaluate: nothing to submit")
        roots = _submitit_roots(found)
        before = {root: _files_under(root) for root in roots}
        try:
            job_ids = array.submit_plan(found)
        except (FailedJobError, SlurmUnreachable, SubmissionUnknown) as exc:
            if isinstance(exc, SlurmUnreachable):
                daemon: str | None = exc.daemon
            elif isinstance(exc, SubmissionUnknown):  # sbatch's answer lost, and squeue did not answer either
                daemon = outage.CONTROLLER
            else:
                daemon = outage.unanswered("sbatch", str(exc))
            if daemon is None:
                raise
            for root, files in before.items():
                _remove_new(root, files)
            return verb.fail(f"nothing submitted: {outage.outage_text(daemon, str(exc).strip())}", status=1)
        if not args.wait:
            return 0
        failed = {j: s for j, s in (array.wait_for(job_ids) if job_ids else {}).items() if s != "COMPLETED"}
        results = {folder: finished_metrics(folder) for folder in found.finished}
        for p in (prepare(spec) for specs, _ in found.to_submit for spec in specs):
            results.update(
                {
                    str(p.out_dir / key.task_dir): finished_metrics(p.out_dir / key.task_dir)
                    for key in p.keys
                    if task_finished(p.out_dir, key)
                }
            )
    _table({k: v for k, v in results.items() if v}, "evaluations")
    if failed:
        return verb.fail(
            f"{len(failed)} task(s) did not complete: " + ", ".join(f"{j} {s}" for j, s in sorted(failed.items())),
            status=1,
        )
    return 0


def _submitit_roots(found: array.Plan) -> set[Path]:
    """The folders submitit writes a submission's files in before Slurm gives the job id (`submit_plan`'s folder
    up to its first %j): what is new there after a submission Slurm never took is left over."""
    roots = set()
    for specs, params in found.to_submit:
        folder = array.submitit_folder(specs, params)
        while "%" in str(folder):
            folder = folder.parent
        roots.add(folder)
    return roots


def _files_under(root: Path) -> set[Path] | None:
    """Every path under `root`; None when it does not exist."""
    return set(root.rglob("*")) if root.is_dir() else None


def _remove_new(root: Path, before: set[Path] | None) -> None:
    """Take away what appeared under `root` since `before` (`root` itself when it was not there)."""
    if before is None:
        shutil.rmtree(root, ignore_errors=True)
        return
    for path in sorted(set(root.rglob("*")) - before, key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def stage_main(argv: list[str], entry: str) -> int:
    """What `sbatch/eval_aime.sh` (and an evaluation task across nodes) runs through `entry`, its stages/ file: the
    evaluation of one checkpoint in this allocation (`main(argv, in_job=True)`), nothing submitted. One node, or
    outside Slurm: the evaluation itself. Several nodes (Beam: TP8 x PP2 over two nodes): the inputs checked first
    (bad input exits 2 before any node is touched), then one srun over all nodes starts the job's Ray cluster
    (`jobs.ray_cluster.node`) and runs `entry` as the driver on the head node, where RAY_ADDRESS is set and vLLM's Ray
    executor places its workers on every node."""
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1)
    if nodes <= 1 or os.environ.get("RAY_ADDRESS"):
        return main(argv, in_job=True)
    status = main([*argv, "--check"], in_job=True)
    if status != 0:
        return status
    allocation = allocation_from_env()
    command = srun_per_node(
        nodes,
        [sys.executable, "-m", "beam_slurm.jobs.ray_cluster.node", "--", sys.executable, entry, *argv],
        cpus_per_task=allocation.cpus_on_node,
        gpus_per_node=allocation.gpus_on_node,
        job_name="eval-ray",
    )
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
