"""`beam-slurm report RUN_OR_SWEEP [RUN ...]`: the evaluations and training curves of one run, or of several runs side
by side, in one table and one figure (PNG and SVG).

Sources under each run's export path: our evaluations (``beam_evals/global_step_<N>/metrics.json``, see
:mod:`beam_slurm.evaluation.results`); SkyRL's eval dumps (``dumped_evals/global_step_<N>_evals/*.jsonl``: accuracy =
share of positively scored responses, else ``(avg_score + 1) / 2`` from ``aggregated_results.jsonl``); and
``train_metrics.jsonl`` (a later line for a step replaces an earlier one, as a requeued job redoes it). Datasets are
named by the file they came from (`problems.dataset_label`), runs by the settings that differ between them
(`label_runs`); numbers made by the rehearsal trainer are marked wherever they appear.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, fit_columns, table_console, verb_table
from beam_slurm.core.atomic_files import atomic_writer
from beam_slurm.core.errors import UserError
from beam_slurm.core.layout import CONFIG_FILE, RUN_DIRNAME, STEP_DIR, SWEEP_FILE, run_file
from beam_slurm.core.run_store import RunStore
from beam_slurm.evaluation.problems import labels_by_source
from beam_slurm.evaluation.results import EVALS_DIRNAME, INFO_FILE, METRICS_FILE, write_json
from beam_slurm.pipeline.goodput import PHASES, Ledger, run_ledgers
from beam_slurm.pipeline.runs import (RunNotFound, RunTarget, exports_root as default_exports_root, resolve_run,
                                     resolve_runs, sweep_folder)

# matplotlib is imported inside write_plot: only the plot needs it, and it is slow to import.

SKYRL_DUMPS_DIRNAME = "dumped_evals"
TRAIN_METRICS_FILE = "train_metrics.jsonl"
REWARD_KEY = "reward/avg_raw_reward"
LENGTH_KEY = "generate/avg_num_tokens"
PLOT_FILE = "report.png"
SUMMARY_FILE = "report.json"
COMPARE_STEM = "compare"  # runs given one by one: compare.* beside the first run's evaluations
REHEARSAL_RUN = "rehearsal: checks the plumbing, does not train"  # also in `status` and `submit`
FIRST_DATASETS = ("aime2025", "aime2024")  # accuracy panels first, in this order

_DUMP_DIR = re.compile(r"^global_step_(\d+)_evals$")
# Keys that name a run rather than a setting: never what tells two runs apart in a label.
_NOT_A_SETTING = re.compile(r"^(run_name|paths\..*|data\..*|hydra\..*|eval\.launcher\.(name|submitit_folder))$")


class ReportInputError(UserError, ValueError):
    """The run cannot be found or read; the message says where the report looked."""


@dataclass
class EvalPoint:
    """Accuracy of one data source at one training step, from one origin."""

    step: int
    data_source: str  # as the evaluation keys it (e.g. aime2025 or math_dapo)
    origin: str  # "beam" for our evaluation, "skyrl" for the trainer's in-training dump
    accuracy: float  # avg@k for ours; share of positively scored responses for SkyRL's
    responses: int | None = None  # behind SkyRL's number
    metrics: dict[str, Any] = field(default_factory=dict)  # our full metrics entry; empty for SkyRL
    dataset: str = ""  # the name tables and plots show (aime2024 for AIME 2024's math_dapo)
    rehearsal: bool = False  # made by the rehearsal, or our evaluation of its unchanged base-weight export

    @property
    def ci95(self) -> tuple[float, float] | None:
        interval = self.metrics.get("avg@k_ci95")
        return (float(interval[0]), float(interval[1])) if isinstance(interval, (list, tuple)) and len(interval) == 2 \
            else None


@dataclass
class RunReport:
    """Everything the report found for one run."""

    export_path: Path
    evals: list[EvalPoint] = field(default_factory=list)
    train: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> train_metrics.jsonl's numbers
    problems: list[str] = field(default_factory=list)  # files that could not be read, and why (not fatal)
    rehearsal: bool = False  # some numbers come from the rehearsal trainer: made up
    name: str = ""
    label: str = ""  # the settings that tell this run from the others (label_runs)
    settings: dict[str, str] = field(default_factory=dict)  # those settings, key -> value
    choices: list[str] | None = None  # swept `key=value` when it came from a sweep folder
    goodput: Ledger | None = None  # where the run's GPU-hours went (`beam_slurm.pipeline.goodput`)
    gpus_per_node: int = 1

    @property
    def rehearsal_note(self) -> str:
        return " [REHEARSAL: made-up numbers, nothing was trained]" if self.rehearsal else ""


def _is_export_path(path: Path) -> bool:
    return any((path / name).exists() for name in (EVALS_DIRNAME, SKYRL_DUMPS_DIRNAME, TRAIN_METRICS_FILE))


def resolve_export_path(run: str, exports_root: str | None = None) -> Path:
    """The export path of a run given as a folder (or one holding it two levels down), a run name or a job id."""
    with contextlib.suppress(RunNotFound):  # a run with a record (beam_run/run.json): the resolver of every verb
        return resolve_run(run, exports_root)
    base = Path(run).expanduser()
    base = base if base.is_dir() else default_exports_root(exports_root) / run
    if base.is_dir() and _is_export_path(base):
        return base
    for depth_pattern in ("*", "*/*") if base.is_dir() else ():
        found = sorted(p for p in base.glob(depth_pattern) if p.is_dir() and _is_export_path(p))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            listing = ", ".join(str(p) for p in found[:5])
            raise ReportInputError(f"{base} holds several runs' results ({listing}); pass one of them, or the "
                                   "sweep folder (with sweep.json) to compare them")
    raise ReportInputError(
        f"no evaluations found for run {run!r} (looked in {base} for {EVALS_DIRNAME}/, {SKYRL_DUMPS_DIRNAME}/ "
        f"or {TRAIN_METRICS_FILE}); pass the run's export path or set --exports-root")


def resolve_targets(targets: list[str], exports_root: str | None = None) -> list[RunTarget]:
    """Runs named by the arguments, in order, each once: a sweep folder (or its sweep.json) stands for its runs."""
    found: list[RunTarget] = []
    for target in targets:
        sweep = sweep_folder(Path(target).expanduser())
        if sweep is not None:
            runs = resolve_runs(target, exports_root)
            if not runs:
                raise ReportInputError(f"{sweep / SWEEP_FILE} lists no runs (every point was invalid?)")
            found += runs
        else:
            found.append(RunTarget(resolve_export_path(target, exports_root)))
    unique: dict[Path, RunTarget] = {}
    for item in found:
        unique.setdefault(item.export_path.resolve(), item)
    return list(unique.values())


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix[:-1]: value}
    return {name: leaf for key, item in value.items() for name, leaf in _flatten(item, f"{prefix}{key}.").items()}


def run_config(export_path: Path) -> dict[str, Any]:
    """The run's resolved recipe (beam_run/config.yaml) as flat `key: value`; {} when the run has none."""
    try:
        # libyaml's safe loader when present: the same result, ~10x faster (status reads every run's recipe).
        loaded = yaml.load((Path(export_path) / RUN_DIRNAME / CONFIG_FILE).read_text(encoding="utf-8"),
                           Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception:  # unreadable, or a YAML error in a hand-edited file: no labels from it, the rest stands
        return {}
    return _flatten(loaded) if isinstance(loaded, dict) else {}


def is_rehearsal_run(export_path: Path, config: dict[str, Any] | None = None) -> bool:
    """trainer.backend=rehearsal; without a saved recipe (plain sbatch), the first training-metrics line says so."""
    config = run_config(export_path) if config is None else config
    if "trainer.backend" in config:
        return config["trainer.backend"] == "rehearsal"
    try:
        with open(Path(export_path) / TRAIN_METRICS_FILE, encoding="utf-8") as handle:
            return json.loads(handle.readline()).get("rehearsal") is True
    except (OSError, ValueError, AttributeError):
        return False


def _recorded_data_files(export_path: Path) -> list[str]:
    """Evaluation files the run's recipe names and those its evaluations recorded (info.json "data")."""
    config = run_config(export_path)
    data_dir = str(config.get("paths.data_dir") or "").rstrip("/")
    files = [f"{data_dir}/{name}" if data_dir and not str(name).startswith("/") else str(name)
             for name in config.get("paths.eval_files") or []]
    root = Path(export_path) / EVALS_DIRNAME
    for info_file in sorted(root.glob(f"*/{INFO_FILE}")) if root.is_dir() else []:
        try:
            info = json.loads(info_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        infos = [info] + [i for i in (info.get("datasets") or {}).values() if isinstance(i, dict)]
        files += [str(data["path"]) for one in infos for data in one.get("data") or []
                  if isinstance(data, dict) and data.get("path")]
    return list(dict.fromkeys(files))


def dataset_labels(export_path: Path) -> dict[str, str]:
    """{data_source: label} for a run's evaluation files, e.g. {"math_dapo": "aime2024"} (files that can be read)."""
    return labels_by_source(_recorded_data_files(Path(export_path)))


def entry_label(source: str, entry: dict[str, Any] | None, labels: dict[str, str]) -> str:
    """The name of one metrics.json entry: the label its evaluation recorded, else by the run's files."""
    recorded = (entry or {}).get("dataset") if isinstance(entry, dict) else None
    return str(recorded) if recorded else labels.get(source, source)


def _step_folders(root: Path, pattern: re.Pattern) -> list[tuple[int, Path]]:
    """(step, folder) of the folders in `root` whose name `pattern` matches, in name order."""
    return [(int(m[1]), f) for f in sorted(root.iterdir()) if (m := pattern.match(f.name))] if root.is_dir() else []


def _collect_ours(report: RunReport, labels: dict[str, str]) -> None:
    for step, folder in _step_folders(report.export_path / EVALS_DIRNAME, STEP_DIR):
        if not (folder / METRICS_FILE).is_file():
            continue  # unfinished evaluations have no metrics.json yet
        try:
            with open(folder / METRICS_FILE, encoding="utf-8") as handle:
                metrics = json.load(handle)
        except (OSError, json.JSONDecodeError) as error:
            report.problems.append(f"{folder / METRICS_FILE}: {error}")
            continue
        if not isinstance(metrics, dict):
            continue
        for source, entry in metrics.items():
            if not isinstance(entry, dict) or "avg@k" not in entry:
                report.problems.append(f"{folder / METRICS_FILE}: entry {source!r} has no avg@k")
                continue
            report.evals.append(EvalPoint(step, source, "beam", float(entry["avg@k"]), metrics=entry,
                                          dataset=entry_label(source, entry, labels),
                                          rehearsal=entry.get("rehearsal") is True))


def _collect_skyrl(report: RunReport, labels: dict[str, str]) -> None:
    # Folders not named by a step (e.g. eval_only) are not tied to a training step.
    for step, folder in _step_folders(report.export_path / SKYRL_DUMPS_DIRNAME, _DUMP_DIR):
        seen: set[str] = set()
        for dump in sorted(p for p in folder.glob("*.jsonl") if p.name != "aggregated_results.jsonl"):
            positive, total, source, made_up = 0, 0, dump.stem, False
            try:
                with open(dump, encoding="utf-8") as handle:
                    for line in handle:
                        if not line.strip():
                            continue
                        row = json.loads(line)
                        made_up |= row.get("rehearsal") is True
                        source = row.get("data_source") or source
                        total += 1
                        score = row["score"]
                        positive += (float(sum(score)) if isinstance(score, list) else float(score)) > 0
            except (OSError, ValueError, KeyError, TypeError) as error:
                report.problems.append(f"{dump}: {error!r}")
                continue
            report.rehearsal |= made_up
            if total:
                seen.add(source)
                report.evals.append(EvalPoint(step, source, "skyrl", positive / total, responses=total,
                                              dataset=labels.get(source, source), rehearsal=made_up))
        aggregated = folder / "aggregated_results.jsonl"
        if aggregated.is_file():
            try:
                values = json.loads(aggregated.read_text(encoding="utf-8").splitlines()[0])
            except (OSError, IndexError, ValueError) as error:
                report.problems.append(f"{aggregated}: {error!r}")
                continue
            for key, value in values.items():
                parts = key.split("/")
                if (len(parts) == 3 and parts[0] == "eval" and parts[2] == "avg_score" and parts[1] != "all"
                        and parts[1] not in seen and isinstance(value, (int, float))):
                    report.evals.append(EvalPoint(step, parts[1], "skyrl", (float(value) + 1) / 2,
                                                  dataset=labels.get(parts[1], parts[1])))


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
            except (ValueError, TypeError, AttributeError):
                report.problems.append(f"{path}:{number}: not a JSON object with a step")
                continue
            report.rehearsal |= row.get("rehearsal") is True
            numbers = {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            report.train.setdefault(step, {}).update(numbers)


def gather(export_path: Path) -> RunReport:
    """Read every evaluation and the training metrics found under a run's export path."""
    export_path = Path(export_path)
    report = RunReport(export_path=export_path, name=RunStore(export_path).read().run_name or export_path.name)
    labels = dataset_labels(export_path)
    _collect_ours(report, labels)
    _collect_skyrl(report, labels)
    _collect_train(report)
    report.rehearsal |= is_rehearsal_run(export_path) or any(p.rehearsal for p in report.evals)
    report.evals.sort(key=lambda p: (p.step, p.dataset.lower(), p.origin))
    return report


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
    keys = list(dict.fromkeys(key for report, pairs in zip(reports, given)
                              for key in [*_pairs(report.choices or []), *pairs] if not _NOT_A_SETTING.match(key)))

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
            chosen = [k for k in every if not _NOT_A_SETTING.match(k)
                      and len({_text(c.get(k)) for c in configs}) > 1
                      and not any(n and n in _text(c.get(k)) for c in configs for n in names)]
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
    table = verb_table(f"Evaluations of {len(reports)} runs" if several
                       else f"Evaluations of {reports[0].export_path}{reports[0].rehearsal_note}")
    columns = (["run"] if several else []) + ["step", "dataset", "avg@k", "95% CI", "pass@k", "maj@k", "k", "timeouts",
                                              "SkyRL acc", "reward", "mean tokens"]
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
            cells = [str(step), dataset + (" (rehearsal)" if made_up else ""), _fmt(ours.accuracy) if ours else "-",
                     f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "-",
                     _fmt(ours.metrics.get(f"pass@{k}")) if ours and k else "-",
                     _fmt(ours.metrics.get("maj@k")) if ours else "-", str(k) if k else "-",
                     str(ours.metrics.get("timeouts", "-")) if ours else "-", _fmt(skyrl.accuracy) if skyrl else "-",
                     _fmt(train.get(REWARD_KEY)), _fmt(train.get(LENGTH_KEY), 0)]
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
            console.print(f"{where}training metrics: {len(steps)} steps ({steps[0]}..{steps[-1]}) in "
                          f"{report.export_path / TRAIN_METRICS_FILE}")
        if not report.evals and not report.train:
            console.print(f"{where}no finished evaluation or training metrics yet in {report.export_path}")
        if report.rehearsal:
            console.print(f"{where}[red]{REHEARSAL_RUN}[/red]: its numbers are made up or from the unchanged base "
                          "weights")
        for problem in report.problems:
            console.print(f"{where}[yellow]skipped[/yellow] {problem}")


def print_ledger(reports: list[RunReport], console) -> None:
    """One row per run: allocated node-seconds and GPU-hours, the goodput ratio, each phase's share; a sweep's sum."""
    measured = [r for r in reports if r.goodput is not None and r.goodput.allocated_node_seconds]
    if not measured:
        return
    table = verb_table("Where the GPU-hours went (node-seconds; % of allocated)")
    for column in ["run", "allocated", "GPU-h", "goodput", *PHASES]:
        table.add_column(column, justify="left" if column == "run" else "right", overflow="fold")
    hours = [r.goodput.allocated_node_seconds * r.gpus_per_node / 3600 for r in measured]

    def add_row(label: str, allocated: float, gpu_hours: float, goodput: float, phases: dict[str, float]) -> None:
        table.add_row(label, f"{allocated:.0f}", f"{gpu_hours:.2f}", f"{goodput:.1f} %",
                      *(f"{100 * phases[p] / allocated:.1f}" for p in PHASES))

    for report, gpu_hours in zip(measured, hours):
        ledger = report.goodput
        add_row(report.label or report.name, ledger.allocated_node_seconds, gpu_hours, 100 * (ledger.ratio or 0),
                ledger.phases)
    if len(measured) > 1:
        allocated = sum(r.goodput.allocated_node_seconds for r in measured)
        phases = {p: sum(r.goodput.phases[p] for r in measured) for p in PHASES}
        table.add_section()
        add_row("all runs", allocated, sum(hours), 100 * phases["productive"] / allocated, phases)
    fit_columns(table, console.width)
    console.print(table)


PHASE_COLOURS = {"bring_up": "#9e9e9e", "model_load": "#bcaaa4", "productive": "#43a047", "lost": "#e53935",
                 "checkpoint": "#1e88e5", "evaluation": "#8e24aa", "hang": "#fb8c00", "stopping": "#616161",
                 "spare": "#e0e0e0", "unaccounted": "#ffffff"}


def write_timeline(reports: list[RunReport], path: Path) -> Path | None:
    """One row per attempt, coloured by phase (spares not drawn: they sit beside the Ray step), the end kind and the
    step reached written at its end; None when no run has a ledger."""
    lines = [(r, line) for r in reports if r.goodput for line in r.goodput.timeline]
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = min(line.segments[0].start if line.segments else line.start for _, line in lines)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(lines) + 1.6))
    for row, (report, line) in enumerate(reversed(lines)):
        for segment in line.segments:
            if segment.phase != "spare":
                ax.barh(row, segment.end - segment.start, left=segment.start - start, height=0.6,
                        color=PHASE_COLOURS[segment.phase], edgecolor="none")
        step = "-" if line.step_at_end is None else line.step_at_end
        ax.text(line.end - start, row, f"  {line.end_kind}, step {step}", va="center", fontsize=8)
    ax.set_yticks(range(len(lines)))
    ax.set_yticklabels([f"{(r.label or r.name) + ' ' if len(reports) > 1 else ''}job {line.job_id} attempt "
                        f"{line.attempt}" for r, line in reversed(lines)], fontsize=8)
    ax.set_xlabel("seconds since the first allocation started")
    drawn = [p for p in PHASES if p not in ("spare", "unaccounted")]
    ax.legend([plt.Rectangle((0, 0), 1, 1, color=PHASE_COLOURS[p]) for p in drawn], drawn, ncol=4, fontsize=7,
              loc="upper left", bbox_to_anchor=(0, -0.35 if len(lines) < 4 else -0.15))
    ax.set_title("Attempts by phase (goodput ledger)")
    fig.tight_layout()
    with atomic_writer(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
    return path


def series(report: RunReport) -> dict[str, Any]:
    """A run's curves, as plotted: accuracy per dataset (ours and SkyRL's), reward and response length, by step."""
    accuracy: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for point in sorted(report.evals, key=lambda p: p.step):
        lines = accuracy.setdefault(point.dataset, {"beam": [], "skyrl": []})
        if point.origin == "beam":
            lines["beam"].append({"step": point.step, "avg@k": point.accuracy, "k": point.metrics.get("k"),
                                  "ci95": list(point.ci95) if point.ci95 else None, "rehearsal": point.rehearsal})
        else:
            lines["skyrl"].append({"step": point.step, "accuracy": point.accuracy, "rehearsal": point.rehearsal})
    steps = sorted(report.train)
    return {"accuracy": {name: accuracy[name] for name in sorted(accuracy, key=_dataset_order)},
            "reward": [[s, report.train[s][REWARD_KEY]] for s in steps if REWARD_KEY in report.train[s]],
            "response_length": [[s, report.train[s][LENGTH_KEY]] for s in steps if LENGTH_KEY in report.train[s]]}


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
    panels = [("accuracy", name) for name in datasets] + [("reward", None), ("response_length", None)]
    columns = 2
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 4.2 * rows), squeeze=False)
    for index, (kind, name) in enumerate(panels):
        ax = axes[index // columns][index % columns]
        for number, (report, curve) in enumerate(zip(reports, curves)):
            colour = f"C{number % 10}"
            if kind == "accuracy":
                lines = curve["accuracy"].get(name, {"beam": [], "skyrl": []})
                ours = lines["beam"]
                if ours:
                    ax.plot([p["step"] for p in ours], [100 * p["avg@k"] for p in ours], "-o", color=colour,
                            label=report.label)
                    banded = [p for p in ours if p["ci95"]]
                    if banded:
                        ax.fill_between([p["step"] for p in banded], [100 * p["ci95"][0] for p in banded],
                                        [100 * p["ci95"][1] for p in banded], color=colour, alpha=0.18, linewidth=0)
                if lines["skyrl"]:
                    ax.plot([p["step"] for p in lines["skyrl"]], [100 * p["accuracy"] for p in lines["skyrl"]],
                            "--x", color=colour, alpha=0.7, label=None if ours else report.label)
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


def summary(report: RunReport) -> dict[str, Any]:
    """Machine-readable form of one run's report (an element of report.json's "runs")."""
    return {"name": report.name, "label": report.label, "settings": report.settings,
            "export_path": str(report.export_path), "rehearsal": report.rehearsal, "series": series(report),
            "evaluations": [{"step": p.step, "dataset": p.dataset, "data_source": p.data_source, "origin": p.origin,
                             "accuracy": p.accuracy, "responses": p.responses, "metrics": p.metrics,
                             "rehearsal": p.rehearsal} for p in report.evals],
            "train": {str(step): values for step, values in sorted(report.train.items())},
            "goodput": report.goodput.to_json() if report.goodput else None, "skipped": report.problems}


def output_paths(targets: list[RunTarget], plot: Path | None) -> tuple[Path, Path]:
    """(PNG, report.json): --plot; else one run's beam_evals/, one sweep's folder, or compare.* beside the first run's."""
    if plot is not None:
        return plot, plot.with_suffix(".json")
    sweeps = {t.sweep_dir for t in targets}
    folder = targets[0].export_path / EVALS_DIRNAME
    if len(targets) > 1 and len(sweeps) == 1 and None not in sweeps:
        folder = sweeps.pop()
    elif len(targets) > 1:
        return folder / f"{COMPARE_STEM}.png", folder / f"{COMPARE_STEM}.json"
    return folder / PLOT_FILE, folder / SUMMARY_FILE


def build_parser():
    verb = VerbArgs("report", __doc__.split("\n\n")[0].replace("`", ""), settings=False)
    verb.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP",
                      help="a run (export path or a folder holding it, run name, training job id) or a sweep folder; "
                           "several are compared side by side")
    verb.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    verb.add_argument("--plot", type=Path,
                      help=f"PNG to write, with the SVG and JSON beside it (default: one run's {EVALS_DIRNAME}/"
                           f"{PLOT_FILE}, a sweep's folder, or {COMPARE_STEM}.png beside the first run's evaluations)")
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
    payload = {"runs": [summary(r) for r in reports], "plot": str(png), "svg": str(svg),
               "timeline_plot": str(timeline) if timeline else None}
    write_json(summary_file, payload)
    if args.json:
        print(json.dumps(payload, indent=2))
        return 0
    print_table(reports)
    print(f"figure: {png} (and {svg.name}){f'; timeline: {timeline}' if timeline else ''}; data: {summary_file}")
    return 0
