"""Evaluations as Slurm job arrays through submitit: expand, skip what is finished, submit the rest, run one task.

Task keys that share samples (several k) are merged; the rest is ONE job array per resource shape, with the recipe's
`eval.launcher` settings (Hydra's submitit launcher's keys). A task is checkpointable: on preemption or time-out
submitit requeues it and it resumes from the chunks it saved. A task wider than one node starts a Ray cluster on its
nodes (`beam_slurm.jobs.ray_cluster.node`) and rank 0 runs the evaluation as the driver."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import submitit
import submitit.slurm.slurm  # loaded by `import submitit` too, but mypy knows the attribute only from this
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from beam_slurm import REPO_ROOT
from beam_slurm.config.load import load_config
from beam_slurm.config.schema import BeamConfig
from beam_slurm.core.atomic_files import write_json
from beam_slurm.core.logs import installed
from beam_slurm.jobs.data.manifest import sha256_file
from beam_slurm.jobs.evaluation import hang_guard, resumable
from beam_slurm.jobs.evaluation.checkpoints import resolve_checkpoint
from beam_slurm.jobs.evaluation.generate import (
    ClientSettings,
    EngineSettings,
    OfflineEngine,
    SamplingSettings,
    ServerEngine,
    settings_record,
)
from beam_slurm.jobs.evaluation.grading_pool import GradingLimits
from beam_slurm.jobs.evaluation.problems import dataset_label, read_problems
from beam_slurm.slurm import scheduler, submission
from beam_slurm.slurm.scheduler import SlurmCommandError

logger = logging.getLogger(__name__)
SLURM_SILENCE_LIMIT_S = 600.0  # `--wait` gives up when squeue/sacct stay silent this long


@dataclass(frozen=True)
class TaskSpec:
    """What one array task evaluates (pickled by submitit; the task loads the recipe itself from `overrides`)."""

    checkpoint: str | None  # None with server
    data_file: str
    out_dir: str
    ks: tuple[int, ...]  # every k to write results for; responses are generated for the largest
    overrides: tuple[str, ...] = ()
    base_model: str | None = None
    server: str | None = None
    served_model: str | None = None


@dataclass
class Prepared:
    """A spec with its inputs read and checked (no model loaded)."""

    spec: TaskSpec
    cfg: BeamConfig
    eval_input: Any
    problems: list
    data: dict
    keys: list[resumable.TaskKey]
    sampling: Any
    engine: Any
    client: Any

    @property
    def out_dir(self) -> Path:
        return Path(self.spec.out_dir)

    @property
    def store(self) -> resumable.SampleStore:
        return resumable.SampleStore(self.out_dir / self.keys[0].samples_dir)


def prepare(spec: TaskSpec) -> Prepared:
    """Load the recipe, resolve the checkpoint, read the problems; raises on bad input (before any model loads)."""
    cfg = load_config(list(spec.overrides), validate=False)
    sampling = replace(SamplingSettings.from_config(cfg), n=max(spec.ks))
    client = engine = eval_input = None
    if spec.server:
        client = ClientSettings.from_config(cfg, spec.server, spec.served_model)
    else:
        assert spec.checkpoint is not None  # a task without a server has a checkpoint
        eval_input = resolve_checkpoint(spec.checkpoint, spec.base_model)
        engine = EngineSettings.from_config(cfg, ray_cluster=bool(os.environ.get("RAY_ADDRESS")))
    path = Path(spec.data_file).expanduser().resolve()
    problems = read_problems(path, cfg.eval.limit)
    data: dict[str, Any] = {"path": str(path), "sha256": sha256_file(path), "problems": len(problems)}
    label = dataset_label(path, problems[0].data_source)
    identity = resumable.sampling_identity(
        eval_input.describe() if eval_input else None,
        {"url": spec.server, "model": spec.served_model} if spec.server else None,
        data["sha256"],
        sampling,
    )
    keys = [resumable.TaskKey(label, k, identity, cfg.eval.limit) for k in sorted(spec.ks, reverse=True)]
    return Prepared(spec, cfg, eval_input, problems, data, keys, sampling, engine, client)


def run_tasks(specs: list[TaskSpec]) -> dict[str, dict]:
    """Run tasks in this process: generation for all (one engine per model), then grading; {task folder: metrics}."""
    prepared = [prepare(spec) for spec in specs]
    engines: dict[Any, Any] = {}

    def engine_for(p: Prepared) -> Any:
        # One engine per model, layout and sampling (k aside: each request carries its own count) for every
        # task of this process, so the datasets of one checkpoint load vLLM once.
        key = (repr(p.eval_input), repr(p.engine), repr(p.client), repr(replace(p.sampling, n=1)))
        if key not in engines:
            engines[key] = (
                ServerEngine(p.client, p.sampling) if p.client else OfflineEngine(p.eval_input, p.sampling, p.engine)
            )
        return engines[key]

    started = time.time()
    progress = [resumable.Progress() for _ in prepared]
    results: dict[str, dict] = {}
    with contextlib.ExitStack() as locks:
        try:
            for p, done in zip(prepared, progress, strict=False):
                locks.enter_context(resumable.locked(p.store.folder / resumable.STORE_LOCK))
                requeue = functools.partial(hang_guard.requeue_this_task, p.cfg.eval.launcher.max_num_timeout)
                with hang_guard.GenerationWatchdog(
                    p.cfg.eval.hang_timeout_s,
                    float(p.cfg.trainer.expected_model_load_s),
                    p.store.folder,
                    on_hang=requeue,
                ) as watchdog:
                    resumable.generate_missing(
                        p.store,
                        p.problems,
                        max(p.spec.ks),
                        functools.partial(engine_for, p),
                        p.cfg.eval.chunk_problems,
                        done,
                        chunk_saved=watchdog.chunk_saved,
                    )
        finally:
            for engine in engines.values():
                engine.close()
            engines.clear()
        for p, done in zip(prepared, progress, strict=False):
            resumable.grade_missing(p.store, GradingLimits.from_settings(p.cfg.grade), done)
            grades = p.store.grades()
            for key in p.keys:
                array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
                record = {
                    "checkpoint": p.spec.checkpoint,
                    "global_step": p.eval_input.global_step if p.eval_input else None,
                    "dataset": key.dataset,
                    "data": [p.data],
                    "fingerprint": {**key.identity, "k": key.k, "limit": key.limit},
                    "settings": settings_record(replace(p.sampling, n=key.k), p.engine, p.client),
                    "progress": asdict(done),
                    "started_at": started,
                    "finished_at": time.time(),
                    "slurm_job_id": array_job
                    and f"{array_job}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
                    or os.environ.get("SLURM_JOB_ID"),
                }
                results[str(p.out_dir / key.task_dir)] = resumable.write_task_results(
                    p.out_dir, key, resumable.first_k(grades, p.problems, key.k), record
                )
            resumable.refresh_view(p.out_dir)
    return results


@contextlib.contextmanager
def notice_for_this_process_only() -> Any:
    """Keep submitit's notice (USR2) from the processes this task starts (vLLM's engine and the grading workers would
    die of it before this process requeues), and let it reach this one. Children inherit the blocked mask; a thread
    started before the block keeps it deliverable."""
    notice = submitit.slurm.slurm.SlurmJobEnvironment.USR_SIG
    if isinstance(notice, str):
        notice = getattr(signal, notice if notice.startswith("SIG") else f"SIG{notice}")
    done = threading.Event()
    threading.Thread(target=done.wait, name="slurm-notice", daemon=True).start()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {notice})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        done.set()


class EvalTask(submitit.helpers.Checkpointable):
    """One array task: one checkpoint on each of its datasets (one model load); requeued, it resumes from disk."""

    def __init__(self, specs: tuple[TaskSpec, ...] | TaskSpec):
        self.specs = (specs,) if isinstance(specs, TaskSpec) else tuple(specs)

    def __call__(self) -> dict[str, dict]:
        env = submitit.JobEnvironment()
        first = self.specs[0]
        with installed("beam_slurm", stream="stdout"), notice_for_this_process_only():
            logger.info(
                f"evaluate: task {env.job_id} attempt {os.environ.get('SLURM_RESTART_COUNT', '0')} "
                f"on {env.hostname}: {first.checkpoint} x {', '.join(Path(s.data_file).name for s in self.specs)} "
                f"k={list(first.ks)}"
            )
            if env.num_nodes > 1 and not os.environ.get("RAY_ADDRESS"):
                return self._across_nodes(env)
            return run_tasks(list(self.specs))

    def _across_nodes(self, env) -> dict[str, dict]:
        # Every node joins the Ray cluster; rank 0 is the head and runs this same task as the driver (RAY_ADDRESS set).
        spec = self.specs[0]
        argv = [
            "--out",
            spec.out_dir,
            *spec.overrides,
            f"eval.responses_per_problem={max(spec.ks)}",
            *(arg for one in self.specs for arg in ("--data", one.data_file)),
        ]
        if spec.checkpoint:
            argv += ["--checkpoint", spec.checkpoint]
        else:
            assert spec.server is not None  # a task without a checkpoint has a server
            argv += ["--server", spec.server]
        argv += ["--base-model", spec.base_model] if spec.base_model else []
        status = subprocess.run(
            [
                sys.executable,
                "-m",
                "beam_slurm.jobs.ray_cluster.node",
                "--",
                sys.executable,
                str(REPO_ROOT / "stages" / "evaluate.py"),
                *argv,
            ],
            check=False,
        ).returncode
        if env.global_rank != 0:
            return {}
        if status != 0:
            raise RuntimeError(f"the evaluation driver on the Ray head exited with status {status}")
        smaller = [
            replace(one, ks=tuple(k for k in one.ks if k != max(one.ks))) for one in self.specs if len(one.ks) > 1
        ]
        return run_tasks(smaller) if smaller else {}


def launcher_parameters(cfg: BeamConfig) -> dict[str, Any]:
    """The array's Slurm settings from eval.launcher, with the recipe's layout and cluster filling the empty ones."""
    params = {k: v for k, v in asdict(cfg.eval.launcher).items() if k != "_target_"}
    gpus = cfg.rollout.tensor_parallel * cfg.rollout.pipeline_parallel
    per_node = cfg.cluster.gpus_per_node
    if not params.get("nodes"):
        params["nodes"] = max(1, math.ceil(gpus / per_node)) if per_node else 1
    if params.get("gpus_per_node") is None:
        params["gpus_per_node"] = min(gpus, per_node) if per_node else 0
    params.update({k: getattr(cfg.cluster, k) for k in ("partition", "account", "qos") if params.get(k) is None})
    return params


def make_executor(params: dict[str, Any], folder: Path):
    """submitit's Slurm executor for these settings, the way Hydra's submitit launcher maps its config onto it."""
    executor = submitit.AutoExecutor(
        folder=str(folder), cluster="slurm", slurm_max_num_timeout=params["max_num_timeout"]
    )
    base = {f.name for f in fields(BaseQueueConf)}
    # gpus_per_node 0: a CPU-only partition, no GPU request at all.
    executor.update_parameters(
        **{
            key if key in base else f"slurm_{key}": value
            for key, value in params.items()
            if key not in ("submitit_folder", "max_num_timeout")
            and value is not None
            and (value or key != "gpus_per_node")
        }
    )
    return executor


def submit_array(
    tasks: list[tuple[TaskSpec, ...]], params: dict[str, Any], folder: Path, owner: str = "evaluate"
) -> list[str]:
    """Submit tasks as one job array; returns the task job ids, recorded beside each task's results.

    The array carries a submission token in its comment (`owner`: the run or sweep point, stage `eval`). When
    submitit's sbatch loses its answer (a time-out, a transport error), squeue is asked for the token: the array
    Slurm has is adopted (submitit's task files are moved where its tasks read them), else it is submitted again."""
    token = submission.submission_token(owner, "eval")
    # Held until submitit has made each task's log folder (it can only name them once Slurm gave the job id): a
    # task that an idle cluster starts at once otherwise dies opening its log ("Could not open stdout file").
    held = {
        **params,
        "comment": submission.with_token(str(params.get("comment") or ""), token),
        "additional_parameters": {**(params.get("additional_parameters") or {}), "hold": True},
    }
    since, calls = time.time(), 0
    while True:
        calls += 1
        executor = make_executor(held, folder)
        try:
            with executor.batch():
                jobs = [executor.submit(EvalTask(specs)) for specs in tasks]
            ids = [job.job_id for job in jobs]
            if calls > 1:
                submission.cancel_duplicates(token, ids[0].split("_")[0], _warn)
            break
        except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as exc:
            said = str(exc).strip()
            if said and not submission.is_transport_error(said):
                raise
            logger.warning(f"evaluate: sbatch's answer was lost ({said or 'no word'}); asking Slurm for {token}")
            decision = submission.after_lost_answer(submission.find_token(token), calls)
            if decision.action == "adopt":
                ids = adopt_array(folder, decision.job_id, tasks, since)
                logger.warning(f"evaluate: Slurm has job array {decision.job_id} with comment {token}: adopted")
                submission.cancel_duplicates(token, decision.job_id, _warn, found=decision.extra)
                break
            if decision.action == "unknown":
                raise submission.SubmissionUnknown(
                    f"the evaluation array's sbatch answer was lost ({said or 'no word'}) and Slurm did not say "
                    f"whether it queued it: `squeue --me --states=all --format='%i %T %k'` shows it with comment "
                    f"{token} once the controller answers",
                    token,
                ) from exc
            _task_pickles(folder, tasks, since, remove=True)  # they belong to no job: the next call dumps its own
            logger.warning(f"evaluate: Slurm has no job with comment {token}: submitting again")
    array_id = ids[0].split("_")[0]
    try:
        scheduler.release(array_id)
    except scheduler.SlurmCommandError as exc:
        scheduler.cancel(array_id)
        raise RuntimeError(
            f"evaluation array {array_id} was submitted held and could not be released, so it was cancelled: {exc}"
        ) from exc
    for specs, job_id in zip(tasks, ids, strict=False):
        for spec in specs:
            write_json(
                _submitted_file(spec),
                {"job_id": job_id, "submitted_at": time.time(), "spec": asdict(spec), "token": token},
            )
    return ids


def _warn(line: str) -> None:
    logger.warning(f"evaluate: {line}")


def _task_pickles(
    folder: Path, tasks: list[tuple[TaskSpec, ...]], since: float, *, remove: bool = False
) -> dict[int, Path]:
    """Task index -> the pickle submitit dumped for it since `since` (in its job-independent folder), read back and
    matched by the task's specs; `remove` deletes them instead."""
    found: dict[int, Path] = {}
    where = submitit.core.utils.JobPaths.get_first_id_independent_folder(folder)
    for path in sorted(where.glob("*.pkl")) if where.is_dir() else []:
        try:
            if path.stat().st_mtime < since - 1:
                continue
            function = submitit.core.utils.DelayedSubmission.load(path).function
        except (OSError, ValueError, EOFError, AttributeError):
            continue
        specs = getattr(function, "specs", None)
        if isinstance(function, EvalTask) and specs in tasks:
            if remove:
                path.unlink(missing_ok=True)
            else:
                found.setdefault(tasks.index(specs), path)
    return found


def adopt_array(folder: Path, array_id: str, tasks: list[tuple[TaskSpec, ...]], since: float) -> list[str]:
    """Make the array Slurm created (its answer lost) runnable: each task's pickle moved where its task reads it, as
    submitit does once it knows the id. Returns the task job ids (the array is held: nothing has started)."""
    pickles = _task_pickles(folder, tasks, since)
    missing = [index for index in range(len(tasks)) if index not in pickles]
    if missing:
        raise RuntimeError(f"job array {array_id}: submitit's files for task(s) {missing} are gone; cancel it")
    ids = [f"{array_id}_{index}" for index in range(len(tasks))] if len(tasks) > 1 else [array_id]
    for index, job_id in enumerate(ids):
        submitit.core.utils.JobPaths(folder, job_id=job_id).move_temporary_file(pickles[index], "submitted_pickle")
    return ids


def _submitted_file(spec: TaskSpec) -> Path:
    name = f"{Path(spec.data_file).stem}-{'-'.join(str(k) for k in spec.ks)}"
    return Path(spec.out_dir) / resumable.TASKS_DIRNAME / ".submitted" / f"{name}.json"


@dataclass
class Plan:
    """What an `evaluate` submission will do."""

    to_submit: list[tuple[tuple[TaskSpec, ...], dict]] = field(default_factory=list)  # (specs, launcher params)
    finished: list[str] = field(default_factory=list)  # task folders finished with the same key
    active: list[str] = field(default_factory=list)  # tasks already queued or running


def _active_job(spec: TaskSpec) -> str | None:
    try:
        job_id = json.loads(_submitted_file(spec).read_text())["job_id"]
    except (OSError, ValueError, KeyError):
        return None
    record = submission.job_records([job_id]).get(job_id)
    return job_id if record is not None and record.active else None


def plan(
    points: list[tuple[list[str], BeamConfig]],
    targets: Sequence[tuple[str | None, str | None, Path]],
    data_files: Callable[[BeamConfig], list[str]],
    *,
    force: bool,
    base_model: str | None = None,
) -> Plan:
    """Expand (sweep point x checkpoint x dataset) into task specs; skip finished keys and queued tasks."""
    groups: dict[tuple, dict] = {}
    result = Plan()
    for overrides, cfg in points:
        for checkpoint, _, out_dir in targets:
            for data_file in data_files(cfg):
                spec = TaskSpec(
                    checkpoint=checkpoint,
                    data_file=str(data_file),
                    out_dir=str(out_dir),
                    ks=(cfg.eval.responses_per_problem,),
                    overrides=tuple(overrides),
                    base_model=base_model,
                )
                key = prepare(spec).keys[0]
                if force:
                    shutil.rmtree(out_dir / key.task_dir, ignore_errors=True)
                    shutil.rmtree(out_dir / key.samples_dir, ignore_errors=True)
                elif resumable.task_finished(out_dir, key):
                    result.finished.append(str(out_dir / key.task_dir))
                    continue
                entry = groups.setdefault(
                    (checkpoint, str(data_file), str(out_dir), key.sampling_id, key.limit),
                    {"spec": spec, "params": launcher_parameters(cfg), "k_overrides": {}},
                )
                entry["k_overrides"][key.k] = overrides
    # One array task per checkpoint and sweep point: its datasets share one model load.
    bundles: dict[tuple, tuple[list[TaskSpec], dict]] = {}
    for entry in groups.values():
        ks = entry["k_overrides"]  # k -> the overrides of its sweep point; the largest k's are the task's
        spec = replace(entry["spec"], ks=tuple(sorted(ks)), overrides=tuple(ks[max(ks)]))
        active = None if force else _active_job(spec)
        if active:
            result.active.append(f"{spec.checkpoint} x {Path(spec.data_file).name}: job {active}")
            continue
        bundle = (
            spec.checkpoint,
            spec.out_dir,
            spec.ks,
            spec.overrides,
            spec.base_model,
            repr(sorted(entry["params"].items())),
        )
        bundles.setdefault(bundle, ([], entry["params"]))[0].append(spec)
    result.to_submit = [(tuple(specs), params) for specs, params in bundles.values()]
    return result


def submitit_folder(specs: tuple[TaskSpec, ...], params: dict[str, Any]) -> Path:
    """Where submitit writes an array's files (`%j`: the job id): `eval.launcher.submitit_folder`, else beside the
    tasks' output folder."""
    return Path(params.get("submitit_folder") or Path(specs[0].out_dir).parent / ".submitit" / "%j")


def submit_plan(found: Plan) -> list[str]:
    """Submit the plan's tasks, one array per distinct Slurm shape; returns the task job ids."""
    shapes: dict[str, list[tuple[tuple[TaskSpec, ...], dict]]] = {}
    for specs, params in found.to_submit:
        shapes.setdefault(repr(sorted(params.items(), key=lambda item: item[0])), []).append((specs, params))
    ids: list[str] = []
    for group in shapes.values():
        params = group[0][1]
        folder = submitit_folder(group[0][0], params)
        owner = str(params.get("name") or "evaluate")  # the job name: `<run>-eval-<step>` in a training chain
        submitted = submit_array([specs for specs, _ in group], params, folder, owner)
        logger.info(
            f"evaluate: {len(submitted)} task(s) -> job array {submitted[0].split('_')[0]} "
            f"(at most {params['array_parallelism']} at once, {params['nodes']} node(s) x "
            f"{params['gpus_per_node']} GPU(s) each)"
        )
        ids += submitted
    return ids


def wait_for(job_ids: list[str], poll_s: float = 5.0) -> dict[str, str]:
    """Show progress (rich) until every task ended; returns job id -> final state."""
    states: dict[str, str] = {}
    unanswered_since: float | None = None
    with Progress(
        TextColumn("evaluate"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        transient=False,
    ) as bar:
        task = bar.add_task("", total=len(job_ids))
        while True:
            try:
                records = submission.job_records(job_ids)
                unanswered_since = None
            except SlurmCommandError as exc:
                # A controller restarting (or failing over) answers again shortly; the tasks run on regardless.
                unanswered_since = unanswered_since or time.monotonic()
                if time.monotonic() - unanswered_since > SLURM_SILENCE_LIMIT_S:
                    raise
                bar.update(task, description=f"Slurm does not answer ({exc}); asking again")
                time.sleep(poll_s)
                continue
            states = {j: records[j].state if j in records else "UNKNOWN" for j in job_ids}
            done = sum(1 for j in job_ids if j in records and records[j].final)
            running = sum(1 for s in states.values() if s == "RUNNING")
            bar.update(task, completed=done, description=f"{running} running")
            if done == len(job_ids):
                return states
            time.sleep(poll_s)
