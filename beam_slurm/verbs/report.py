"""`beam-slurm report RUN_OR_SWEEP [RUN ...]`: the evaluations and training curves of one run, or of several runs side
by side, in one table and one figure (PNG and SVG).

Sources under each run's export path: our evaluations (``beam_evals/global_step_<N>/metrics.json``, see
:mod:`beam_slurm.jobs.evaluation.results`); SkyRL's eval dumps (``dumped_evals/global_step_<N>_evals/*.jsonl``:
accuracy =
share of positively scored responses, else ``(avg_score + 1) / 2`` from ``aggregated_results.jsonl``); and
``train_metrics.jsonl`` (a later line for a step replaces an earlier one, as a requeued job redoes it). Datasets are
named by the file they came from (`problems.dataset_label`), runs by the settings that differ between them
(`label_runs`); numbers made by the rehearsal trainer are marked wherever they appear.
"""

from __future__ import annotations

import collections
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, TypedDict

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, fit_columns, table_console, verb_table
from beam_slurm.core.atomic_files import atomic_writer
from beam_slurm.core.json_text import JsonFloat, json_text
from beam_slurm.core.layout import run_file
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.evaluation.results import EVALS_DIRNAME, write_json
from beam_slurm.launch.run_results import (
    LENGTH_KEY,
    REHEARSAL_RUN,
    REWARD_KEY,
    TRAIN_METRICS_FILE,
    EvalPoint,
    ReportInputError,
    RunReport,
    gather,
    resolve_targets,
    run_config,
)
from beam_slurm.launch.runs import RunTarget
from beam_slurm.policy.goodput import PHASES, RESTART_PHASES, LedgerJson, run_ledgers

# matplotlib is imported inside write_plot: only the plot needs it, and it is slow to import.

# JsonFloat: a number read from a file (metrics.json, SkyRL's dumps, train_metrics.jsonl), null in the JSON where the
# file held NaN or an infinity.

# A point of our evaluation's accuracy curve.
BeamPoint = TypedDict(  # the functional form: a key holds `@`
    "BeamPoint",
    {
        "step": int,
        "avg@k": JsonFloat,
        "k": int | None,  # samples per problem
        "ci95": list[float] | None,  # avg@k's 95 % interval, [low, high]
        "rehearsal": bool,  # made up by a rehearsal (or of its unchanged base weights)
    },
)


class SkyrlPoint(TypedDict):
    """A point of SkyRL's own evaluation during training: the share of positively scored responses."""

    step: int
    accuracy: JsonFloat
    rehearsal: bool


class AccuracyLines(TypedDict):
    """One dataset's accuracy curves: ours and SkyRL's."""

    beam: list[BeamPoint]
    skyrl: list[SkyrlPoint]


class RunSeries(TypedDict):
    """A run's curves, as plotted."""

    accuracy: dict[str, AccuracyLines]  # dataset (aime2024) -> its curves
    reward: list[list[JsonFloat]]  # [step, mean reward] pairs
    response_length: list[list[JsonFloat]]  # [step, mean response tokens] pairs


class EvaluationJson(TypedDict):
    """One data source evaluated at one step, by one origin."""

    step: int
    dataset: str  # the name tables and plots show (aime2024)
    data_source: str  # as the evaluation keys it (aime2024, math_dapo)
    origin: str  # `beam` (our evaluation) or `skyrl` (the trainer's own)
    accuracy: JsonFloat  # avg@k for ours; the share of positively scored responses for SkyRL's
    responses: int | None  # behind SkyRL's number
    metrics: dict[str, Any]  # ours: the metrics.json entry as written (`grade --json`'s metrics); SkyRL's: empty
    rehearsal: bool


class RunSummary(TypedDict):
    """One run's report."""

    name: str
    label: str  # the settings that tell this run from the others, else its name
    settings: dict[str, str]  # those settings, key -> value
    export_path: str
    rehearsal: bool  # some numbers come from the rehearsal trainer: made up
    series: RunSeries
    evaluations: list[EvaluationJson]
    train: dict[str, dict[str, JsonFloat]]  # step -> train_metrics.jsonl's numbers (a redone step's last)
    goodput: LedgerJson | None  # null for a run without a record (plain result folders)
    skipped: list[str]  # files that could not be read, and why


class ReportJson(TypedDict):
    """`report --json` (also written as report.json): every run's curves, evaluations, training metrics and goodput,
    and the figures written."""

    runs: list[RunSummary]
    plot: str  # the figure (PNG)
    svg: str  # the same figure as SVG
    timeline_plot: str | None  # the attempts-by-phase picture; null when no run has a ledger


JSON_OUTPUT = ReportJson

PLOT_FILE = "report.png"
SUMMARY_FILE = "report.json"
COMPARE_STEM = "compare"  # runs given one by one: compare.* beside the first run's evaluations
FIRST_DATASETS = ("aime2025", "aime2024")  # accuracy panels first, in this order

# Keys that name a run rather than a setting: never what tells two runs apart in a label.
_NOT_A_SETTING = re.compile(r"^(run_name|paths\..*|data\..*|hydra\..*|eval\.launcher\.(name|submitit_folder))$")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return str(value)


def _pairs(texts: list[str]) -> dict[str, str]:
    return {key.lstrip("+~"): value for key, _, value in (text.partition("=") for text in texts if "=" in text)}


def label_runs(reports: list[RunReport], max_keys: int = 4) -> None:
    """Label each run by the settings that differ between the runs: swept keys, then overrides, then (when none
    differ) recipe keys other than names and paths. One run alone: its swept keys, else its name."""
    configs = [run_config(r.export_path) for r in reports]
    given = [{**_pairs(list(RunStore(r.export_path).read().overrides)), **_pairs(r.choices or [])} for r in reports]
    keys = list(
        dict.fromkeys(
            key
            for report, pairs in zip(reports, given, strict=False)
            for key in [*_pairs(report.choices or []), *pairs]
            if not _NOT_A_SETTING.match(key)
        )
    )

    def value(index: int, key: str) -> str:
        if key in given[index]:
            return given[index][key]
        return _text(configs[index][key]) if key in configs[index] else "-"

    if len(reports) == 1:
        chosen = [k for k in _pairs(reports[0].choices or []) if not _NOT_A_SETTING.match(k)]
    else:
        chosen = [k for k in keys if len({value(i, k) for i in range(len(reports))}) > 1]
        if not chosen and all(configs):
            every = sorted(set().union(*configs))
            names = [r.name for r in reports]
            chosen = [
                k
                for k in every
                if not _NOT_A_SETTING.match(k)
                and len({_text(c.get(k)) for c in configs}) > 1
                and not any(n and n in _text(c.get(k)) for c in configs for n in names)
            ]
    chosen = chosen[:max_keys]
    for index, report in enumerate(reports):
        report.settings = {k: value(index, k) for k in chosen}
        report.label = " ".join(f"{k}={v}" for k, v in report.settings.items()) or report.name
    counts = collections.Counter(report.label for report in reports)
    for report in reports:
        if counts[report.label] > 1 and report.label != report.name:
            report.label = f"{report.label} ({report.name})"
        if report.rehearsal:
            report.label += " [rehearsal]"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _dataset_order(name: str) -> tuple[int, str]:
    return (FIRST_DATASETS.index(name) if name in FIRST_DATASETS else len(FIRST_DATASETS), name.lower())


def print_table(reports: RunReport | list[RunReport], file=None) -> None:
    """One table for every run: a row per evaluated step and dataset, ours beside SkyRL's, with that step's reward."""
    reports = [reports] if isinstance(reports, RunReport) else reports
    console = table_console(file, pipe_width=180)
    several = len(reports) > 1
    table = verb_table(
        f"Evaluations of {len(reports)} runs"
        if several
        else f"Evaluations of {reports[0].export_path}{reports[0].rehearsal_note}"
    )
    columns = (["run"] if several else []) + [
        "step",
        "dataset",
        "avg@k",
        "95% CI",
        "pass@k",
        "maj@k",
        "k",
        "timeouts",
        "SkyRL acc",
        "reward",
        "mean tokens",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column in ("run", "dataset") else "right", overflow="fold")
    for report in reports:
        rows: dict[tuple[int, str], dict[str, EvalPoint]] = {}
        for point in report.evals:
            rows.setdefault((point.step, point.dataset), {})[point.origin] = point
        if not rows and report.train:  # not evaluated yet: its latest training step keeps the run on the table
            rows[(max(report.train), "-")] = {}
        steps_seen: set[int] = set()
        ordered = sorted(rows.items(), key=lambda item: (item[0][0], _dataset_order(item[0][1])))
        for index, ((step, dataset), by_origin) in enumerate(ordered):
            ours, skyrl = by_origin.get("beam"), by_origin.get("skyrl")
            train = report.train.get(step, {}) if step not in steps_seen else {}
            steps_seen.add(step)
            k = ours.metrics.get("k") if ours else None
            interval = ours.ci95 if ours else None
            made_up = any(p.rehearsal for p in by_origin.values())
            cells = [
                str(step),
                dataset + (" (rehearsal)" if made_up else ""),
                _fmt(ours.accuracy) if ours else "-",
                f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "-",
                _fmt(ours.metrics.get(f"pass@{k}")) if ours and k else "-",
                _fmt(ours.metrics.get("maj@k")) if ours else "-",
                str(k) if k else "-",
                str(ours.metrics.get("timeouts", "-")) if ours else "-",
                _fmt(skyrl.accuracy) if skyrl else "-",
                _fmt(train.get(REWARD_KEY)),
                _fmt(train.get(LENGTH_KEY), 0),
            ]
            if several:
                cells = [report.label if index == 0 else ""] + cells
            table.add_row(*cells)
        if several and report is not reports[-1]:
            table.add_section()
    fit_columns(table, console.width)
    console.print(table)
    print_ledger(reports, console)
    for report in reports:
        where = f"{report.label}: " if several else ""
        if report.train:
            steps = sorted(report.train)
            console.print(
                f"{where}training metrics: {len(steps)} steps ({steps[0]}..{steps[-1]}) in "
                f"{report.export_path / TRAIN_METRICS_FILE}"
            )
        if not report.evals and not report.train:
            console.print(f"{where}no finished evaluation or training metrics yet in {report.export_path}")
        if report.rehearsal:
            console.print(
                f"{where}[red]{REHEARSAL_RUN}[/red]: its numbers are made up or from the unchanged base weights"
            )
        for problem in report.problems:
            console.print(f"{where}[yellow]skipped[/yellow] {problem}")


def print_ledger(reports: list[RunReport], console) -> None:
    """One row per run: allocated node-seconds and GPU-hours, the goodput ratio, each phase's share; a sweep's sum."""
    measured = [(r, r.goodput) for r in reports if r.goodput is not None and r.goodput.allocated_node_seconds]
    if not measured:
        return
    table = verb_table("Where the GPU-hours went (node-seconds; % of allocated)")
    for column in ["run", "allocated", "GPU-h", "goodput", *PHASES]:
        table.add_column(column, justify="left" if column == "run" else "right", overflow="fold")
    hours = [ledger.allocated_node_seconds * r.gpus_per_node / 3600 for r, ledger in measured]

    def add_row(label: str, allocated: float, gpu_hours: float, goodput: float, phases: dict[str, float]) -> None:
        table.add_row(
            label,
            f"{allocated:.0f}",
            f"{gpu_hours:.2f}",
            f"{goodput:.1f} %",
            *(f"{100 * phases[p] / allocated:.1f}" for p in PHASES),
        )

    for (report, ledger), gpu_hours in zip(measured, hours, strict=False):
        add_row(
            report.label or report.name,
            ledger.allocated_node_seconds,
            gpu_hours,
            100 * (ledger.ratio or 0),
            ledger.phases,
        )
    if len(measured) > 1:
        allocated = sum(ledger.allocated_node_seconds for _, ledger in measured)
        phases = {p: sum(ledger.phases[p] for _, ledger in measured) for p in PHASES}
        table.add_section()
        add_row("all runs", allocated, sum(hours), 100 * phases["productive"] / allocated, phases)
    fit_columns(table, console.width)
    console.print(table)


PHASE_COLOURS = {
    "bring_up": "#9e9e9e",
    "model_load": "#bcaaa4",
    "productive": "#43a047",
    "lost": "#e53935",
    "checkpoint": "#1e88e5",
    "evaluation": "#8e24aa",
    "hang": "#fb8c00",
    "stopping": "#616161",
    "spare": "#e0e0e0",
    "unaccounted": "#ffffff",
}


# An in-job restart's phases (`goodput.restart_phases`), drawn as a thin strip under its attempt from the fault on.
RESTART_COLOURS = {
    "detection": "#fdd835",
    "stopping": PHASE_COLOURS["stopping"],
    "bring_up": PHASE_COLOURS["bring_up"],
    "model_load": PHASE_COLOURS["model_load"],
    "first_step": PHASE_COLOURS["productive"],
}
TIMELINE_ROW_IN = 0.42  # inches per attempt: the figure's height follows the number of attempts
TIMELINE_FRAME_IN = 1.5  # inches for the title, the x axis and its label, and the legend below it


def timeline_figure(reports: list[RunReport]):
    """One row per attempt, coloured by phase (spares not drawn: they sit beside the Ray step), the end kind and the
    step reached written at its end, inside the axes; the legend below the x label. None when no run has a ledger."""
    lines = [(r, line) for r in reports if r.goodput for line in r.goodput.timeline]
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = min(line.segments[0].start if line.segments else line.start for _, line in lines)
    fig, ax = plt.subplots(figsize=(11, TIMELINE_ROW_IN * len(lines) + TIMELINE_FRAME_IN), layout="constrained")
    ends = []
    for row, (_, line) in enumerate(reversed(lines)):
        for segment in line.segments:
            if segment.phase != "spare":
                ax.barh(
                    row,
                    segment.end - segment.start,
                    left=segment.start - start,
                    height=0.6,
                    color=PHASE_COLOURS[segment.phase],
                    edgecolor="none",
                )
        restart_strip(ax, row, line.restart, start)
        step = "-" if line.step_at_end is None else line.step_at_end
        ends.append(ax.text(line.end - start, row, f"  {line.end_kind}, step {step}", va="center", fontsize=8))
    ax.set_yticks(range(len(lines)))
    ax.set_yticklabels(
        [
            f"{(r.label or r.name) + ' ' if len(reports) > 1 else ''}job {line.job_id} attempt {line.attempt}"
            for r, line in reversed(lines)
        ],
        fontsize=8,
    )
    ax.set_ylim(-0.6, len(lines) - 0.4)
    ax.set_xlabel("seconds since the first allocation started")
    ax.set_title("Attempts by phase (goodput ledger)")
    drawn = [p for p in PHASES if p not in ("spare", "unaccounted")]
    handles = [plt.Rectangle((0, 0), 1, 1, color=PHASE_COLOURS[p]) for p in drawn]
    if any(line.restart for _, line in lines):  # the strip's own two colours; the others are the phases'
        drawn += ["restart: detection", "restart: first step"]
        handles += [plt.Rectangle((0, 0), 1, 1, color=RESTART_COLOURS[p]) for p in ("detection", "first_step")]
    fig.legend(
        handles,
        drawn,
        ncol=len(drawn) if len(drawn) <= 8 else (len(drawn) + 1) // 2,  # two rows with the restart's
        fontsize=7,
        loc="outside lower center",
        frameon=False,
    )
    # Room on the right for the longest end label: widen the x range until each ends inside the axes.
    fig.draw_without_rendering()
    low, high = ax.get_xlim()
    width = ax.get_window_extent().width
    room = [(text.get_position()[0], text.get_window_extent().width + 4) for text in ends]
    ax.set_xlim(low, max([high] + [low + (x - low) * width / max(width - w, 1.0) for x, w in room]))
    return fig


def restart_strip(ax: Any, row: int, restart: dict[str, Any], start: float) -> None:
    """Under an in-job restart's row: its phases from the fault to the first resumed step, and their total."""
    at = restart.get("fault_at")
    if at is None:
        return
    for phase in RESTART_PHASES:
        seconds = restart.get(phase)
        if seconds is None:
            break  # not reached or not recorded: later phases cannot be placed
        ax.barh(row - 0.38, seconds, left=at - start, height=0.14, color=RESTART_COLOURS[phase], edgecolor="none")
        at += seconds
    if restart.get("total") is not None:
        kind = "warm" if restart.get("warm") else "cold"
        ax.text(at - start, row - 0.38, f" {kind} restart {restart['total']:.1f} s", va="center", fontsize=6)


def write_timeline(reports: list[RunReport], path: Path) -> Path | None:
    """`timeline_figure` as PNG at `path`; None (nothing written) when no run has a ledger."""
    fig = timeline_figure(reports)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    try:
        with atomic_writer(path, "wb") as handle:
            fig.savefig(handle, format="png", dpi=110)
    finally:
        plt.close(fig)
    return path


def series(report: RunReport) -> RunSeries:
    """A run's curves, as plotted: accuracy per dataset (ours and SkyRL's), reward and response length, by step."""
    accuracy: dict[str, AccuracyLines] = {}
    for point in sorted(report.evals, key=lambda p: p.step):
        lines = accuracy.setdefault(point.dataset, {"beam": [], "skyrl": []})
        if point.origin == "beam":
            lines["beam"].append(
                {
                    "step": point.step,
                    "avg@k": point.accuracy,
                    "k": point.metrics.get("k"),
                    "ci95": list(point.ci95) if point.ci95 else None,
                    "rehearsal": point.rehearsal,
                }
            )
        else:
            lines["skyrl"].append({"step": point.step, "accuracy": point.accuracy, "rehearsal": point.rehearsal})
    steps = sorted(report.train)
    return {
        "accuracy": {name: accuracy[name] for name in sorted(accuracy, key=_dataset_order)},
        "reward": [[s, report.train[s][REWARD_KEY]] for s in steps if REWARD_KEY in report.train[s]],
        "response_length": [[s, report.train[s][LENGTH_KEY]] for s in steps if LENGTH_KEY in report.train[s]],
    }


def write_plot(reports: RunReport | list[RunReport], path: Path) -> tuple[Path, Path]:
    """The figure as PNG at `path` and SVG beside it, one colour per run; returns (png, svg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reports = [reports] if isinstance(reports, RunReport) else reports
    if not all(r.label for r in reports):
        label_runs(reports)
    curves = [series(r) for r in reports]
    datasets = sorted({name for c in curves for name in c["accuracy"]} | set(FIRST_DATASETS), key=_dataset_order)
    panels: list[tuple[Literal["accuracy", "reward", "response_length"], str]] = [
        ("accuracy", name) for name in datasets
    ]
    panels += [("reward", ""), ("response_length", "")]  # (the dataset names an accuracy panel only)
    columns = 2
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 4.2 * rows), squeeze=False)
    for index, (kind, name) in enumerate(panels):
        ax = axes[index // columns][index % columns]
        for number, (report, curve) in enumerate(zip(reports, curves, strict=False)):
            colour = f"C{number % 10}"
            if kind == "accuracy":
                lines: AccuracyLines = curve["accuracy"].get(name, {"beam": [], "skyrl": []})
                ours = lines["beam"]
                if ours:
                    ax.plot(
                        [p["step"] for p in ours],
                        [100 * p["avg@k"] for p in ours],
                        "-o",
                        color=colour,
                        label=report.label,
                    )
                    banded = [(p["step"], interval) for p in ours if (interval := p["ci95"])]
                    if banded:
                        ax.fill_between(
                            [step for step, _ in banded],
                            [100 * interval[0] for _, interval in banded],
                            [100 * interval[1] for _, interval in banded],
                            color=colour,
                            alpha=0.18,
                            linewidth=0,
                        )
                if lines["skyrl"]:
                    ax.plot(
                        [p["step"] for p in lines["skyrl"]],
                        [100 * p["accuracy"] for p in lines["skyrl"]],
                        "--x",
                        color=colour,
                        alpha=0.7,
                        label=None if ours else report.label,
                    )
            else:
                points = curve[kind]
                if points:
                    ax.plot([s for s, _ in points], [v for _, v in points], "-", color=colour, label=report.label)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        if kind == "accuracy":
            ax.set_title(f"{name} accuracy vs step (avg@k, band: 95% CI; dashed: SkyRL's eval)", fontsize=10)
        else:
            ax.set_title({"reward": "training reward vs step", "response_length": "mean response length vs step"}[kind])
        ax.set_ylabel({"accuracy": "accuracy (%)", "reward": "mean reward", "response_length": "tokens"}[kind])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "nothing recorded yet", transform=ax.transAxes, ha="center", va="center", color="grey")
    for index in range(len(panels), rows * columns):
        axes[index // columns][index % columns].axis("off")
    marked = [r.label for r in reports if r.rehearsal]
    if marked:
        fig.suptitle(f"REHEARSAL (made-up numbers, nothing was trained): {', '.join(marked)}", color="tab:red")
    fig.tight_layout()
    png, svg = Path(path), Path(path).with_suffix(".svg")
    try:
        with atomic_writer(png, "wb") as handle:
            fig.savefig(handle, format="png", dpi=110)
        with atomic_writer(svg, "wb") as handle:
            fig.savefig(handle, format="svg")
    finally:
        plt.close(fig)
    return png, svg


def summary(report: RunReport) -> RunSummary:
    """Machine-readable form of one run's report (an element of report.json's "runs")."""
    return {
        "name": report.name,
        "label": report.label,
        "settings": report.settings,
        "export_path": str(report.export_path),
        "rehearsal": report.rehearsal,
        "series": series(report),
        "evaluations": [
            {
                "step": p.step,
                "dataset": p.dataset,
                "data_source": p.data_source,
                "origin": p.origin,
                "accuracy": p.accuracy,
                "responses": p.responses,
                "metrics": p.metrics,
                "rehearsal": p.rehearsal,
            }
            for p in report.evals
        ],
        "train": {str(step): values for step, values in sorted(report.train.items())},
        "goodput": report.goodput.to_json() if report.goodput else None,
        "skipped": report.problems,
    }


def output_paths(targets: list[RunTarget], plot: Path | None) -> tuple[Path, Path]:
    """(PNG, report.json): --plot; else one run's beam_evals/, one sweep's folder, or compare.* beside the first
    run's."""
    if plot is not None:
        return plot, plot.with_suffix(".json")
    sweeps = {t.sweep_dir for t in targets}
    folder = targets[0].export_path / EVALS_DIRNAME
    if len(targets) > 1 and len(sweeps) == 1 and None not in sweeps:
        sweep = sweeps.pop()
        assert sweep is not None  # (checked above)
        folder = sweep
    elif len(targets) > 1:
        return folder / f"{COMPARE_STEM}.png", folder / f"{COMPARE_STEM}.json"
    return folder / PLOT_FILE, folder / SUMMARY_FILE


def build_parser():
    verb = VerbArgs("report", __doc__.split("\n\n")[0].replace("`", ""), settings=False)
    verb.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_OR_SWEEP",
        help="a run (export path or a folder holding it, run name, training job id) or a sweep folder; "
        "several are compared side by side",
    )
    verb.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    verb.add_argument(
        "--plot",
        type=Path,
        help=f"PNG to write, with the SVG and JSON beside it (default: one run's {EVALS_DIRNAME}/"
        f"{PLOT_FILE}, a sweep's folder, or {COMPARE_STEM}.png beside the first run's evaluations)",
    )
    verb.add_argument("--json", action="store_true", help="print the report (series per run) as JSON, not a table")
    return verb


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        args = verb.parse(argv).args
        targets = resolve_targets(args.runs, args.exports_root)
    except (VerbUsageError, ReportInputError) as error:
        return verb.fail(error)
    reports = [replace(gather(target.export_path), choices=list(target.choices)) for target in targets]
    # Where the GPU-hours went: one sacct call for every run with a record (not in gather, which status calls too).
    recorded = [r for r in reports if run_file(r.export_path).is_file()]
    ledgers = run_ledgers([r.export_path for r in recorded])
    for report in recorded:
        report.goodput = ledgers[report.export_path]
        report.gpus_per_node = int(run_config(report.export_path).get("cluster.gpus_per_node") or 1)
    if not any(r.evals or r.train for r in reports):
        where = ", ".join(str(t.export_path) for t in targets)
        return verb.fail(f"no finished evaluation or training metrics yet in {where}")
    label_runs(reports)
    plot, summary_file = output_paths(targets, args.plot)
    png, svg = write_plot(reports, plot)
    timeline = write_timeline(reports, png.with_name(png.stem + "-timeline.png"))
    payload: ReportJson = {
        "runs": [summary(r) for r in reports],
        "plot": str(png),
        "svg": str(svg),
        "timeline_plot": str(timeline) if timeline else None,
    }
    write_json(summary_file, payload)
    if args.json:
        print(json_text(payload))
        return 0
    print_table(reports)
    print(f"figure: {png} (and {svg.name}){f'; timeline: {timeline}' if timeline else ''}; data: {summary_file}")
    return 0
