"""`beam-slurm report <run dir | run name>`: every evaluation of a run in one table by step, and a PNG plot.

Sources, all under the run's export path (SkyRL's ``trainer.export_path``):

- our evaluations: ``beam_evals/global_step_<N>/metrics.json`` (+ ``details.json``), see
  :mod:`beam_slurm.evaluation.results`;
- SkyRL's own eval dumps: ``dumped_evals/global_step_<N>_evals/<data_source>.jsonl``, one line per response with
  "score" (the AIME env's +1 / -1, or per-token rewards whose sum is the response's reward) and "data_source";
  accuracy = share of responses with a positive score. When a data source has no per-response file, its
  ``eval/<data_source>/avg_score`` in ``aggregated_results.jsonl`` gives accuracy = (avg_score + 1) / 2;
- training metrics: ``train_metrics.jsonl``, one JSON object per logged step, as the trainer's logging callback
  writes it: ``{"step": N, "reward/avg_raw_reward": .., "generate/avg_num_tokens": .., ...}`` (SkyRL's own
  metric names; "global_step" is accepted for "step"; a later line for the same step replaces an earlier one,
  which is what a requeued job that redoes a step produces). The report plots reward and mean response length.

The run argument is a run as `beam_slurm.pipeline.runs.resolve_run` finds it (its folder, name or training job
id), or a folder (the export path itself, or a folder that holds it at most two levels down) or a run name,
looked up as ``<exports root>/<name>`` with the exports root from ``--exports-root``, else
``$BEAM_EXPORTS_ROOT``, else ``$HOME/exports`` (the seed's default export path is ``$HOME/exports/<run_name>``).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beam_slurm.atomic_files import atomic_writer
from beam_slurm.evaluation.results import DETAILS_FILE, EVALS_DIRNAME, METRICS_FILE, write_json

SKYRL_DUMPS_DIRNAME = "dumped_evals"
TRAIN_METRICS_FILE = "train_metrics.jsonl"
REWARD_KEY = "reward/avg_raw_reward"
LENGTH_KEY = "generate/avg_num_tokens"
PLOT_FILE = "report.png"
SUMMARY_FILE = "report.json"

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_DUMP_DIR = re.compile(r"^global_step_(\d+)_evals$")


class ReportInputError(ValueError):
    """The run cannot be found or read; the message says where the report looked."""


@dataclass
class EvalPoint:
    """Accuracy of one data source at one training step, from one origin."""

    step: int
    """Training step of the evaluated checkpoint."""
    data_source: str
    """Data source name as it appears in the evaluation (e.g. aime2025)."""
    origin: str
    """"beam" for our standalone evaluation, "skyrl" for the trainer's in-training evaluation dump."""
    accuracy: float
    """avg@k for ours; share of positively scored responses for SkyRL's dump."""
    responses: int | None = None
    """Responses behind the number (SkyRL dumps), or None."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """Our full metrics entry (pass@j, maj@k, k, timeouts); empty for SkyRL."""
    mean_tokens: float | None = None
    """Mean response length in tokens where known."""


@dataclass
class RunReport:
    """Everything the report found for one run."""

    export_path: Path
    """The run's export path."""
    evals: list[EvalPoint] = field(default_factory=list)
    """Evaluation points, ours and SkyRL's."""
    train: dict[int, dict[str, float]] = field(default_factory=dict)
    """Training metrics by step (from train_metrics.jsonl)."""
    problems: list[str] = field(default_factory=list)
    """Files that could not be read, with the reason (reported, not fatal)."""
    rehearsal: bool = False
    """Some numbers come from the rehearsal trainer (marked "rehearsal": true): made up, it does not train."""

    @property
    def rehearsal_note(self) -> str:
        return " [REHEARSAL: made-up numbers, nothing was trained]" if self.rehearsal else ""


def _is_export_path(path: Path) -> bool:
    return any((path / name).exists() for name in (EVALS_DIRNAME, SKYRL_DUMPS_DIRNAME, TRAIN_METRICS_FILE))


def resolve_export_path(run: str, exports_root: str | None = None) -> Path:
    """The export path of a run given as a folder, a run name or a training job id (see the module docstring)."""
    from beam_slurm.pipeline.runs import RunNotFound, resolve_run

    try:  # a run with a record (beam_run/run.json): the one resolver every verb that takes RUN uses
        return resolve_run(run, exports_root)
    except RunNotFound:
        pass
    candidates: list[Path] = []
    given = Path(run).expanduser()
    if given.is_dir():
        candidates.append(given)
    else:
        root = exports_root or os.environ.get("BEAM_EXPORTS_ROOT") or str(Path.home() / "exports")
        candidates.append(Path(root).expanduser() / run)
    for base in candidates:
        if not base.is_dir():
            continue
        if _is_export_path(base):
            return base
        for depth_pattern in ("*", "*/*"):
            found = sorted(p for p in base.glob(depth_pattern) if p.is_dir() and _is_export_path(p))
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                listing = ", ".join(str(p) for p in found[:5])
                raise ReportInputError(f"{base} holds several runs' results ({listing}); pass one of them")
    looked = ", ".join(str(p) for p in candidates)
    raise ReportInputError(
        f"no evaluations found for run {run!r} (looked in {looked} for {EVALS_DIRNAME}/, {SKYRL_DUMPS_DIRNAME}/ "
        f"or {TRAIN_METRICS_FILE}); pass the run's export path or set --exports-root"
    )


def _read_json(path: Path, report: RunReport) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        report.problems.append(f"{path}: {error}")
        return None


def _collect_ours(report: RunReport) -> None:
    root = report.export_path / EVALS_DIRNAME
    if not root.is_dir():
        return
    for folder in sorted(root.iterdir()):
        match = _STEP_DIR.match(folder.name)
        if not match or not (folder / METRICS_FILE).is_file():
            continue  # unfinished evaluations have no metrics.json yet
        metrics = _read_json(folder / METRICS_FILE, report)
        details = _read_json(folder / DETAILS_FILE, report) if (folder / DETAILS_FILE).is_file() else {}
        if not isinstance(metrics, dict):
            continue
        for source, entry in metrics.items():
            if not isinstance(entry, dict) or "avg@k" not in entry:
                report.problems.append(f"{folder / METRICS_FILE}: entry {source!r} has no avg@k")
                continue
            tokens = ((details or {}).get(source) or {}).get("response_tokens", {}).get("mean")
            report.evals.append(
                EvalPoint(int(match.group(1)), source, "beam", float(entry["avg@k"]), metrics=entry, mean_tokens=tokens)
            )


def _response_reward(score: Any) -> float:
    if isinstance(score, list):
        return float(sum(score))
    return float(score)


def _collect_skyrl(report: RunReport) -> None:
    root = report.export_path / SKYRL_DUMPS_DIRNAME
    if not root.is_dir():
        return
    for folder in sorted(root.iterdir()):
        match = _DUMP_DIR.match(folder.name)
        if not match:
            continue  # e.g. eval_only: not tied to a training step
        step = int(match.group(1))
        seen: set[str] = set()
        for dump in sorted(folder.glob("*.jsonl")):
            if dump.name == "aggregated_results.jsonl":
                continue
            positive = total = 0
            source = dump.stem
            try:
                with open(dump, encoding="utf-8") as handle:
                    for line in handle:
                        if not line.strip():
                            continue
                        row = json.loads(line)
                        report.rehearsal |= row.get("rehearsal") is True
                        source = row.get("data_source") or source
                        total += 1
                        positive += _response_reward(row["score"]) > 0
            except (OSError, ValueError, KeyError, TypeError) as error:
                report.problems.append(f"{dump}: {error!r}")
                continue
            if total:
                seen.add(source)
                report.evals.append(EvalPoint(step, source, "skyrl", positive / total, responses=total))
        aggregated = folder / "aggregated_results.jsonl"
        if aggregated.is_file():
            try:
                first = aggregated.read_text(encoding="utf-8").splitlines()[0]
                values = json.loads(first)
            except (OSError, IndexError, ValueError) as error:
                report.problems.append(f"{aggregated}: {error!r}")
                continue
            for key, value in values.items():
                parts = key.split("/")
                if len(parts) == 3 and parts[0] == "eval" and parts[2] == "avg_score" and parts[1] != "all":
                    if parts[1] not in seen and isinstance(value, (int, float)):
                        report.evals.append(EvalPoint(step, parts[1], "skyrl", (float(value) + 1) / 2))


def _collect_train(report: RunReport) -> None:
    path = report.export_path / TRAIN_METRICS_FILE
    if not path.is_file():
        return
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                step = int(row.get("step", row.get("global_step")))
            except (ValueError, TypeError):
                report.problems.append(f"{path}:{number}: not a JSON object with a step")
                continue
            report.rehearsal |= isinstance(row, dict) and row.get("rehearsal") is True
            numbers = {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            report.train.setdefault(step, {}).update(numbers)


def gather(export_path: Path) -> RunReport:
    """Read every evaluation and the training metrics found under a run's export path."""
    report = RunReport(export_path=export_path)
    _collect_ours(report)
    _collect_skyrl(report)
    _collect_train(report)
    report.evals.sort(key=lambda p: (p.step, p.data_source.lower(), p.origin))
    return report


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def print_table(report: RunReport, file=None) -> None:
    """The report's table: one row per step and data source, ours beside SkyRL's, training metrics per step."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file)
    if not console.is_terminal:
        console = Console(file=file, width=160)
    table = Table(title=f"Evaluations of {report.export_path}{report.rehearsal_note}")
    for column in ("step", "data source", "avg@k", "pass@k", "maj@k", "k", "timeouts", "SkyRL acc", "reward", "mean tokens"):
        table.add_column(column, justify="left" if column == "data source" else "right")
    rows: dict[tuple[int, str], dict[str, EvalPoint]] = {}
    for point in report.evals:
        rows.setdefault((point.step, point.data_source), {})[point.origin] = point
    steps_seen: set[int] = set()
    for (step, source), by_origin in sorted(rows.items(), key=lambda item: (item[0][0], item[0][1].lower())):
        ours, skyrl = by_origin.get("beam"), by_origin.get("skyrl")
        train = report.train.get(step, {}) if step not in steps_seen else {}
        steps_seen.add(step)
        k = ours.metrics.get("k") if ours else None
        table.add_row(
            str(step),
            source,
            _fmt(ours.accuracy) if ours else "-",
            _fmt(ours.metrics.get(f"pass@{k}")) if ours and k else "-",
            _fmt(ours.metrics.get("maj@k")) if ours else "-",
            str(k) if k else "-",
            str(ours.metrics.get("timeouts", "-")) if ours else "-",
            _fmt(skyrl.accuracy) if skyrl else "-",
            _fmt(train.get(REWARD_KEY)),
            _fmt(train.get(LENGTH_KEY), 0),
        )
    console.print(table)
    if report.train:
        steps = sorted(report.train)
        console.print(
            f"training metrics: {len(steps)} steps ({steps[0]}..{steps[-1]}) in {report.export_path / TRAIN_METRICS_FILE}"
        )
    for problem in report.problems:
        console.print(f"[yellow]skipped[/yellow] {problem}")


def write_plot(report: RunReport, path: Path) -> Path:
    """PNG: accuracy vs step per data source (ours solid, SkyRL dashed); reward and mean length vs step if logged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_train = any(REWARD_KEY in m or LENGTH_KEY in m for m in report.train.values())
    fig, axes = plt.subplots(1, 2 if has_train else 1, figsize=(13 if has_train else 7, 4.5), squeeze=False)
    ax = axes[0][0]
    series: dict[tuple[str, str], list[EvalPoint]] = {}
    for point in report.evals:
        series.setdefault((point.data_source, point.origin), []).append(point)
    sources = sorted({source for source, _ in series}, key=str.lower)
    colour_of = {source: f"C{i % 10}" for i, source in enumerate(sources)}  # one colour per data source
    for (source, origin), points in sorted(series.items(), key=lambda item: (item[0][0].lower(), item[0][1])):
        points.sort(key=lambda p: p.step)
        label = f"{source} ({'avg@k, standalone' if origin == 'beam' else 'SkyRL in-training eval'})"
        ax.plot(
            [p.step for p in points],
            [100 * p.accuracy for p in points],
            linestyle="-" if origin == "beam" else "--",
            marker="o" if origin == "beam" else "x",
            color=colour_of[source],
            label=label,
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("AIME accuracy vs step")
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    if has_train:
        ax_reward = axes[0][1]
        steps = sorted(report.train)
        reward = [(s, report.train[s][REWARD_KEY]) for s in steps if REWARD_KEY in report.train[s]]
        length = [(s, report.train[s][LENGTH_KEY]) for s in steps if LENGTH_KEY in report.train[s]]
        if reward:
            ax_reward.plot(*zip(*reward), color="tab:green", label="mean reward")
        ax_reward.set_xlabel("training step")
        ax_reward.set_ylabel("mean reward", color="tab:green")
        ax_reward.grid(alpha=0.3)
        if length:
            ax_length = ax_reward.twinx()
            ax_length.plot(*zip(*length), color="tab:purple", label="mean response tokens")
            ax_length.set_ylabel("mean response length (tokens)", color="tab:purple")
        ax_reward.set_title("Training reward and response length")
    if report.rehearsal:
        fig.suptitle(report.rehearsal_note.strip(" []"), color="tab:red")
    fig.tight_layout()
    try:
        with atomic_writer(path, "wb") as handle:
            fig.savefig(handle, format="png", dpi=110)
    finally:
        plt.close(fig)
    return path


def summary(report: RunReport) -> dict[str, Any]:
    """Machine-readable form of the report (written as report.json beside the plot)."""
    return {
        "export_path": str(report.export_path),
        "evaluations": [
            {"step": p.step, "data_source": p.data_source, "origin": p.origin, "accuracy": p.accuracy,
             "responses": p.responses, "metrics": p.metrics}
            for p in report.evals
        ],
        "train": {str(step): values for step, values in sorted(report.train.items())},
        "skipped": report.problems,
        "rehearsal": report.rehearsal,
    }


def build_parser():
    """The verb's parser: the run, where to look it up, where the plot goes, --json. It reads no recipe key."""
    from beam_slurm.config.verb_args import VerbArgs

    verb = VerbArgs("report", __doc__.split("\n\n")[0], settings=False)
    verb.add_argument("run", help="the run's export path (or a folder holding it), or a run name")
    verb.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    verb.add_argument("--plot", type=Path, help=f"PNG to write (default <export path>/{EVALS_DIRNAME}/{PLOT_FILE})")
    verb.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    return verb


def main(argv: list[str]) -> int:
    from beam_slurm.config.verb_args import VerbUsageError

    verb = build_parser()
    try:
        args = verb.parse(argv).args
        export_path = resolve_export_path(args.run, args.exports_root)
    except (VerbUsageError, ReportInputError) as error:
        return verb.fail(error)
    report = gather(export_path)
    if not report.evals and not report.train:
        return verb.fail(f"{export_path} has no finished evaluation or training metrics yet")
    plot = args.plot or export_path / EVALS_DIRNAME / PLOT_FILE
    write_plot(report, plot)
    write_json(export_path / EVALS_DIRNAME / SUMMARY_FILE, summary(report))
    if args.json:
        print(json.dumps({**summary(report), "plot": str(plot)}, indent=2))
        return 0
    print_table(report)
    print(f"plot: {plot}")
    return 0
