"""A run's results as the verbs read them: its evaluations (ours and SkyRL's), its training curves, its recipe."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from beam_slurm.core.errors import UserError
from beam_slurm.core.layout import CONFIG_FILE, RUN_DIRNAME, STEP_DIR, SWEEP_FILE
from beam_slurm.core.run_record import RunRecord
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.evaluation.problems import labels_by_source
from beam_slurm.jobs.evaluation.results import EVALS_DIRNAME, INFO_FILE, METRICS_FILE
from beam_slurm.launch.runs import RunNotFound, RunTarget, resolve_run, resolve_runs, sweep_folder
from beam_slurm.launch.runs import exports_root as default_exports_root
from beam_slurm.policy.goodput import Ledger

SKYRL_DUMPS_DIRNAME = "dumped_evals"


TRAIN_METRICS_FILE = "train_metrics.jsonl"


REWARD_KEY = "reward/avg_raw_reward"


LENGTH_KEY = "generate/avg_num_tokens"


REHEARSAL_RUN = "rehearsal: checks the plumbing, does not train"  # also in `status` and `submit`


_DUMP_DIR = re.compile(r"^global_step_(\d+)_evals$")


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
        return (
            (float(interval[0]), float(interval[1]))
            if isinstance(interval, (list, tuple)) and len(interval) == 2
            else None
        )


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
    goodput: Ledger | None = None  # where the run's GPU-hours went (`beam_slurm.policy.goodput`)
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
            raise ReportInputError(
                f"{base} holds several runs' results ({listing}); pass one of them, or the "
                "sweep folder (with sweep.json) to compare them"
            )
    raise ReportInputError(
        f"no evaluations found for run {run!r} (looked in {base} for {EVALS_DIRNAME}/, {SKYRL_DUMPS_DIRNAME}/ "
        f"or {TRAIN_METRICS_FILE}); pass the run's export path or set --exports-root"
    )


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
        loaded = yaml.load(
            (Path(export_path) / RUN_DIRNAME / CONFIG_FILE).read_text(encoding="utf-8"),
            Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader),
        )
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
    files = [
        f"{data_dir}/{name}" if data_dir and not str(name).startswith("/") else str(name)
        for name in config.get("paths.eval_files") or []
    ]
    root = Path(export_path) / EVALS_DIRNAME
    for info_file in sorted(root.glob(f"*/{INFO_FILE}")) if root.is_dir() else []:
        try:
            info = json.loads(info_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        infos = [info] + [i for i in (info.get("datasets") or {}).values() if isinstance(i, dict)]
        files += [
            str(data["path"])
            for one in infos
            for data in one.get("data") or []
            if isinstance(data, dict) and data.get("path")
        ]
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
            report.evals.append(
                EvalPoint(
                    step,
                    source,
                    "beam",
                    float(entry["avg@k"]),
                    metrics=entry,
                    dataset=entry_label(source, entry, labels),
                    rehearsal=entry.get("rehearsal") is True,
                )
            )


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
                report.evals.append(
                    EvalPoint(
                        step,
                        source,
                        "skyrl",
                        positive / total,
                        responses=total,
                        dataset=labels.get(source, source),
                        rehearsal=made_up,
                    )
                )
        aggregated = folder / "aggregated_results.jsonl"
        if aggregated.is_file():
            try:
                values = json.loads(aggregated.read_text(encoding="utf-8").splitlines()[0])
            except (OSError, IndexError, ValueError) as error:
                report.problems.append(f"{aggregated}: {error!r}")
                continue
            for key, value in values.items():
                parts = key.split("/")
                if (
                    len(parts) == 3
                    and parts[0] == "eval"
                    and parts[2] == "avg_score"
                    and parts[1] != "all"
                    and parts[1] not in seen
                    and isinstance(value, (int, float))
                ):
                    report.evals.append(
                        EvalPoint(
                            step, parts[1], "skyrl", (float(value) + 1) / 2, dataset=labels.get(parts[1], parts[1])
                        )
                    )


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


def gather(export_path: Path, run: RunRecord | None = None) -> RunReport:
    """Read every evaluation and the training metrics found under a run's export path (`run`: its record, when the
    caller has read it)."""
    export_path = Path(export_path)
    run = RunStore(export_path).read() if run is None else run
    report = RunReport(export_path=export_path, name=run.run_name or export_path.name)
    labels = dataset_labels(export_path)
    _collect_ours(report, labels)
    _collect_skyrl(report, labels)
    _collect_train(report)
    report.rehearsal |= is_rehearsal_run(export_path) or any(p.rehearsal for p in report.evals)
    report.evals.sort(key=lambda p: (p.step, p.dataset.lower(), p.origin))
    return report
