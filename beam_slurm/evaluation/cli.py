"""`beam-slurm evaluate`: generate k responses per AIME problem for one checkpoint, grade them, write the metrics.

Output directory (default ``<export_path>/beam_evals/global_step_N/`` beside the checkpoint):

- ``responses.jsonl``: every generated response (kept for inspection; lets a requeued job skip generation when
  only grading was left), with ``responses.meta.json`` saying which inputs and settings produced it;
- the results files of :mod:`beam_slurm.evaluation.results` (``grades.jsonl``, ``grades.parquet``,
  ``details.json``, ``info.json`` with settings, inputs and timings, and ``metrics.json`` last, which marks the
  evaluation finished).

Settings are recipe keys (``eval.*``, ``generation.*``, ``rollout.tensor_parallel`` ...; ``--help`` lists them with
their defaults from the schema); inputs are flags. A re-run with the same inputs and settings reuses finished
results (``--force`` redoes them); a finished evaluation with different settings is never overwritten without
``--force``. Every input is checked before a model is loaded; bad input exits with status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from beam_slurm.atomic_files import write_text
from beam_slurm.evaluation.checkpoints import CheckpointError, EvalInput, step_of, resolve_checkpoint
from beam_slurm.evaluation.metrics import GradingInputError
from beam_slurm.evaluation.problems import DatasetError, Problem, read_problems
from beam_slurm.evaluation.results import INFO_FILE, METRICS_FILE, evaluation_dir, finished_metrics

RESPONSES_FILE = "responses.jsonl"
RESPONSES_META_FILE = "responses.meta.json"


EVALUATE_KEYS = [
    "eval.responses_per_problem", "generation.max_response_tokens", "generation.max_prompt_tokens",
    "generation.temperature", "generation.top_p", "generation.reasoning_effort",
    "rollout.tensor_parallel", "rollout.pipeline_parallel", "rollout.executor_backend",
    "eval.limit", "eval.dtype", "eval.gpu_memory_utilization", "eval.enforce_eager",
    "eval.server_request_timeout_s", "eval.server_max_attempts", "eval.server_concurrency",
    "grade.timeout_s", "grade.memory_mb", "grade.workers", "paths.data_dir", "paths.eval_files",
]
"""The recipe keys `evaluate` reads (the pipeline renders these for evaluation jobs)."""

# Old flags that carried a setting -> its key (accepted for one release).
OLD_FLAGS = {
    "--k": "eval.responses_per_problem", "--max-tokens": "generation.max_response_tokens",
    "--max-prompt-tokens": "generation.max_prompt_tokens", "--temperature": "generation.temperature",
    "--top-p": "generation.top_p", "--reasoning-effort": "generation.reasoning_effort",
    "--tp": "rollout.tensor_parallel", "--pp": "rollout.pipeline_parallel", "--executor": "rollout.executor_backend",
    "--limit": "eval.limit", "--dtype": "eval.dtype", "--gpu-memory-utilization": "eval.gpu_memory_utilization",
    "--request-timeout": "eval.server_request_timeout_s", "--max-attempts": "eval.server_max_attempts",
    "--concurrency": "eval.server_concurrency", "--grade-timeout": "grade.timeout_s", "--grade-workers": "grade.workers",
}


def build_parser():
    """The verb's parser: inputs and flags; every setting is a recipe key (see --help)."""
    from beam_slurm.config.verb_args import VerbArgs

    verb = VerbArgs(
        "evaluate",
        "Evaluate a checkpoint on AIME: vLLM generation, grading, metrics. Settings are recipe keys, e.g.\n"
        "  beam-slurm evaluate --checkpoint EXPORT/global_step_10 eval.responses_per_problem=8 "
        "rollout.tensor_parallel=1 rollout.pipeline_parallel=1",
        keys=EVALUATE_KEYS,
    )
    source = verb.add_argument_group("what to evaluate")
    source.add_argument("--checkpoint", help="HF export dir (<export_path>/global_step_N[/policy]), any HF model "
                        "dir, or a LoRA adapter dir (with --base-model)")
    source.add_argument("--checkpoint-list", metavar="FILE",
                        help="one checkpoint per line; job-array task i (SLURM_ARRAY_TASK_ID) evaluates line i")
    source.add_argument("--base-model", help="base model dir for a LoRA adapter checkpoint")
    source.add_argument("--data", action="append", metavar="FILE.parquet",
                        help="cleaned AIME parquet (repeat for several); default: paths.eval_files in paths.data_dir")
    server = verb.add_argument_group("already running OpenAI-compatible server (instead of the offline engine)")
    server.add_argument("--server", metavar="URL", help="e.g. http://node1:8000; the token, if any, is read from "
                        "$OPENAI_API_KEY")
    server.add_argument("--served-model", help="model name on the server (default: the first it lists)")
    output = verb.add_argument_group("output")
    output.add_argument("--out", help="output dir (default <export_path>/beam_evals/global_step_N/)")
    output.add_argument("--force", action="store_true", help="redo generation and grading even if results exist")
    output.add_argument("--check", action="store_true",
                        help="only check the inputs and print what would run (status 2 on bad input)")
    for flag, key in OLD_FLAGS.items():
        verb.key_flag(flag, key)
    verb.key_flag("--enforce-eager", "eval.enforce_eager", switch=True)
    return verb


class UsageError(ValueError):
    """Bad command-line input; reported with exit status 2."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _load_problems(files: list[str], limit: int | None) -> tuple[list[Problem], list[dict[str, Any]]]:
    problems: list[Problem] = []
    described = []
    source_of: dict[str, str] = {}
    for name in files:
        path = Path(name).expanduser().resolve()
        file_problems = read_problems(path, limit)
        for source in {p.data_source for p in file_problems}:
            if source_of.setdefault(source, str(path)) != str(path):
                raise DatasetError(
                    f"--data: {path} and {source_of[source]} both hold data_source {source!r}; their metrics would "
                    "mix. Pass each benchmark once"
                )
        problems += file_problems
        described.append({"path": str(path), "sha256": _sha256(path), "problems": len(file_problems)})
    return problems, described


def _fingerprint(args: argparse.Namespace, cfg, eval_input: EvalInput | None, data: list[dict[str, Any]]) -> dict:
    """What makes two evaluations the same: inputs and sampling (not the engine layout, which does not change them)."""
    g = cfg.generation
    return {
        "checkpoint": str(Path(args.checkpoint).expanduser().resolve()) if args.checkpoint else None,
        "model": eval_input.describe() if eval_input else None,
        "server": {"url": args.server, "model": args.served_model} if args.server else None,
        "data": [{"path": d["path"], "sha256": d["sha256"]} for d in data],
        "limit": cfg.eval.limit,
        "k": cfg.eval.responses_per_problem,
        "max_tokens": g.max_response_tokens,
        "temperature": g.temperature,
        "top_p": g.top_p,
        "reasoning_effort": g.reasoning_effort,
    }


def _resolve_out(args: argparse.Namespace, eval_input: EvalInput | None) -> Path:
    if args.out:
        return Path(args.out).expanduser().resolve()
    default = eval_input.default_out_dir() if eval_input else None
    if default is None and args.checkpoint:
        step, run_root = step_of(Path(args.checkpoint).expanduser().resolve())
        if step is not None:
            default = evaluation_dir(run_root, step)
    if default is None:
        raise UsageError(
            "--out is required: the checkpoint is not inside a run's global_step_N directory, so there is no "
            "default <export_path>/beam_evals/global_step_N/"
        )
    return default


def _grading_limits(cfg):
    """The grade section as grading limits (checked now, so a bad value fails before any model is loaded)."""
    from beam_slurm.evaluation.grading_pool import GradingLimits

    return GradingLimits.from_settings(cfg.grade)


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
    lines = []
    for source, entry in sorted(metrics.items()):
        keys = [key for key in ("avg@k", "pass@1", "pass@2", "pass@4", "pass@8", "maj@k") if key in entry]
        values = "  ".join(f"{key}={entry[key]:.4f}" for key in keys)
        lines.append(f"  {source}: k={entry.get('k')}  {values}  timeouts={entry.get('timeouts', 0)}")
    return lines


def _settings(args: argparse.Namespace, cfg):
    from beam_slurm.evaluation.generate import ClientSettings, EngineSettings, SamplingSettings

    sampling = SamplingSettings.from_config(cfg)
    if args.server:
        return sampling, None, ClientSettings.from_config(cfg, args.server, args.served_model)
    return sampling, EngineSettings.from_config(cfg, ray_cluster=bool(os.environ.get("RAY_ADDRESS"))), None


def _data_files(args: argparse.Namespace, cfg) -> list[str]:
    if args.data:
        return list(args.data)
    if not cfg.paths.data_dir:
        raise UsageError("--data FILE.parquet is required, or paths.data_dir (env DATA_DIR) to read the recipe's "
                         f"paths.eval_files ({', '.join(cfg.paths.eval_files)}) from")
    return [str(Path(cfg.paths.data_dir) / name) for name in cfg.paths.eval_files]


def main(argv: list[str] | None = None) -> int:
    from beam_slurm.config.errors import ConfigError
    from beam_slurm.config.verb_args import VerbUsageError

    verb = build_parser()
    log = lambda message: print(message, flush=True)  # noqa: E731  (progress goes to the job log as it happens)

    # 1. Everything that can be checked without a model, so a bad job fails in seconds with status 2.
    try:
        parsed = verb.parse(sys.argv[1:] if argv is None else argv)
        args = parsed.args
        cfg = verb.load(parsed)
        if args.checkpoint_list:
            args.checkpoint = _checkpoint_from_list(args)
        if not args.server and not args.checkpoint:
            raise UsageError("--checkpoint is required (or --server URL to use an already running server)")
        if args.served_model and not args.server:
            raise UsageError("--served-model only applies with --server")
        if cfg.eval.limit is not None and cfg.eval.limit < 1:
            raise UsageError(f"eval.limit must be at least 1 (got {cfg.eval.limit})")
        grading = _grading_limits(cfg)
        eval_input = None if args.server else resolve_checkpoint(args.checkpoint, args.base_model)
        sampling, engine, client = _settings(args, cfg)
        problems, data = _load_problems(_data_files(args, cfg), cfg.eval.limit)
        out_dir = _resolve_out(args, eval_input)
        if out_dir.exists() and not out_dir.is_dir():
            raise UsageError(f"--out: {out_dir} exists and is not a directory")
    except ConfigError as exc:
        return verb.config_failed(exc)
    except (VerbUsageError, UsageError, CheckpointError, DatasetError, GradingInputError, ValueError) as exc:
        return verb.fail(exc)

    if args.check:
        target = args.server or f"{eval_input.label}: {eval_input.model_path}"
        log(f"evaluate: inputs OK: {len(problems)} problems from {len(data)} file(s), k={sampling.n}, on {target}, "
            f"results in {out_dir}")
        return 0

    fingerprint = _fingerprint(args, cfg, eval_input, data)
    finished = finished_metrics(out_dir)
    if finished is not None and not args.force:
        previous = (_read_json(out_dir / INFO_FILE) or {}).get("fingerprint")
        if previous == fingerprint:
            log(f"evaluate: {out_dir} already holds this evaluation; reusing it (--force to redo)")
            for line in _summary_lines(finished):
                log(line)
            return 0
        what = f"k={previous.get('k')}, max_tokens={previous.get('max_tokens')}" if previous else "unknown settings"
        return verb.fail(f"{out_dir} holds a finished evaluation with other inputs or settings ({what}); "
                         "pass --force to replace it, or choose another --out")

    # 2. Generation, unless an earlier attempt (e.g. a requeued job) already wrote the same responses.
    from beam_slurm.evaluation.generate import generate_offline, generate_with_server, settings_record

    started = time.time()
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.force:
        # Drop the finished marker first: if this run dies, the folder must not pass for a finished evaluation.
        (out_dir / METRICS_FILE).unlink(missing_ok=True)
    responses_path = out_dir / RESPONSES_FILE
    meta = _read_json(out_dir / RESPONSES_META_FILE)
    if not args.force and meta is not None and meta.get("fingerprint") == fingerprint and responses_path.is_file():
        rows = [json.loads(line) for line in responses_path.read_text().splitlines() if line.strip()]
        log(f"evaluate: reusing {len(rows)} responses from {responses_path}")
        generation_s = meta.get("generation_s")
    else:
        target = client.api_root if client else eval_input.label
        log(f"evaluate: {len(problems)} problems x k={sampling.n}, max {sampling.max_tokens} tokens, on {target}")
        generation_started = time.monotonic()
        if client is not None:
            rows = generate_with_server(problems, client, sampling, log)
        else:
            rows = generate_offline(problems, eval_input, sampling, engine, log)
        generation_s = time.monotonic() - generation_started
        write_text(responses_path, _jsonl(rows))
        write_text(
            out_dir / RESPONSES_META_FILE,
            json.dumps({"fingerprint": fingerprint, "generation_s": generation_s, "responses": len(rows)}, indent=2),
        )

    # 3. Grading and metrics, through the same code as `beam-slurm grade`.
    from beam_slurm.evaluation.grading_pool import grade_rows
    from beam_slurm.evaluation.metrics import compute_metrics
    from beam_slurm.evaluation.results import write_results

    grading_started = time.monotonic()
    grades = grade_rows(rows, grading)
    metrics = compute_metrics(grades)
    grading_s = time.monotonic() - grading_started
    record = {
        "fingerprint": fingerprint,
        "checkpoint": args.checkpoint,
        "global_step": eval_input.global_step if eval_input else None,
        "data": data,
        "settings": settings_record(sampling, engine, client),
        "generation_s": generation_s,
        "grading_s": grading_s,
        "started_at": started,
        "finished_at": time.time(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
    write_results(out_dir, grades, metrics, extra=record)
    log(f"evaluate: results in {out_dir} (generation {generation_s or 0:.1f} s, grading {grading_s:.1f} s)")
    for line in _summary_lines(metrics):
        log(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
