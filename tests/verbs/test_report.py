"""`beam-slurm grade` and `beam-slurm report` end to end on files laid out as the evaluate stage and SkyRL write them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from beam_slurm.cli import main as beam_slurm
from beam_slurm.jobs.evaluation.metrics import compute_metrics
from beam_slurm.jobs.evaluation.results import evaluation_dir, write_results
from beam_slurm.launch.run_results import TRAIN_METRICS_FILE

AIME2024 = [45, 116, 540]
AIME2025 = [70, 588, 16]


def _responses(right_per_problem: dict[str, list[int]], k: int = 4) -> list[dict]:
    """k responses per problem; the first `right` of them carry the right answer."""
    rows = []
    for source, answers in (("aime2024", AIME2024), ("aime2025", AIME2025)):
        for problem, answer in enumerate(answers):
            right = right_per_problem[source][problem]
            for sample in range(k):
                value = answer if sample < right else answer + 1
                rows.append({
                    "data_source": source, "problem_id": problem, "sample": sample, "ground_truth": str(answer),
                    "response": f"Some reasoning.\nAnswer: {value}", "finish_reason": "stop",
                })
    return rows


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_grade_writes_metrics_and_grades(tmp_path, capsys):
    rows = _responses({"aime2024": [4, 2, 0], "aime2025": [1, 1, 1]})
    out = tmp_path / "graded"
    assert beam_slurm(["grade", "--responses", str(_write_jsonl(tmp_path / "r.jsonl", rows)), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["aime2024"]["avg@k"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert metrics["aime2024"]["pass@2"] == pytest.approx((1 + (1 - 1 / 6) + 0) / 3)
    assert metrics["aime2025"]["avg@k"] == pytest.approx(0.25)
    assert metrics["aime2025"]["maj@k"] == 0.0  # three wrong votes beat one right one
    assert set(metrics["aime2025"]) == {"avg@k", "avg@k_ci95", "pass@1", "pass@2", "pass@4", "maj@k", "k", "timeouts"}
    grades = [json.loads(line) for line in (out / "grades.jsonl").read_text().splitlines()]
    assert len(grades) == len(rows)
    assert set(grades[0]) == set(rows[0]) | {"correct", "pred", "math_verify"}
    assert grades[0]["correct"] is True and grades[0]["pred"] == "45" and grades[0]["math_verify"] is True
    assert pq.read_table(out / "grades.parquet").num_rows == len(rows)
    assert "aime2024" in capsys.readouterr().out
    # Results already there: not replaced without --force (its old spelling --overwrite is refused, naming it).
    assert beam_slurm(["grade", "--responses", str(tmp_path / "r.jsonl"), "--out", str(out)]) == 2
    assert "beam-slurm grade: " in capsys.readouterr().err
    assert beam_slurm(["grade", "--responses", str(tmp_path / "r.jsonl"), "--out", str(out), "--overwrite",
                       "--json", "grade.workers=1"]) == 2
    assert "beam-slurm grade: --overwrite is an old spelling, not accepted; use --force" in capsys.readouterr().err
    assert beam_slurm(["grade", "--responses", str(tmp_path / "r.jsonl"), "--out", str(out), "--force",
                       "--json", "grade.workers=1"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["metrics"] == metrics
    # Grading limits are keys of the grade section; an old flag is refused before anything is read, naming its key.
    assert beam_slurm(["grade", "--responses", str(tmp_path / "r.jsonl"), "--out", str(out), "--force",
                       "--memory-mb", "100"]) == 2
    err = capsys.readouterr().err
    assert "--memory-mb is an old spelling, not accepted; use grade.memory_mb=100" in err and "memory cap" not in err


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"data_source": "a", "problem_id": 1, "sample": 0, "response": "x"}\n', "missing field(s) ground_truth"),
        ("not json\n", "r.jsonl:1: not valid JSON"),
    ],
)
def test_grade_rejects_bad_input_with_status_2(tmp_path, capsys, content, message):
    (tmp_path / "r.jsonl").write_text(content)
    assert beam_slurm(["grade", "--responses", str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_grade_rejects_unequal_k(tmp_path, capsys):
    rows = _responses({"aime2024": [1, 1, 1], "aime2025": [1, 1, 1]})
    rows = [r for r in rows if not (r["data_source"] == "aime2025" and r["problem_id"] == 2 and r["sample"] == 3)]
    assert beam_slurm(["grade", "--responses", str(_write_jsonl(tmp_path / "r.jsonl", rows)), "--out", str(tmp_path / "o")]) == 2
    assert "data source 'aime2025': problem '2' has 3 samples" in capsys.readouterr().err


def _graded(right: dict[str, list[int]]) -> list[dict]:
    grades = []
    for row in _responses(right):
        value = row["response"].rsplit(" ", 1)[1]
        correct = value == row["ground_truth"]
        grades.append({**row, "correct": correct, "pred": value, "math_verify": correct})
    return grades


def _skyrl_dump(export: Path, step: int, source: str, positives: int, total: int) -> None:
    folder = export / "dumped_evals" / f"global_step_{step}_evals"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{source}.jsonl", "w") as handle:
        for i in range(total):
            handle.write(json.dumps({"input_prompt": "p", "output_response": "r", "score": 1.0 if i < positives else -1.0,
                                     "stop_reason": "stop", "env_class": "aime", "env_extras": {}, "data_source": source}) + "\n")
    (folder / "aggregated_results.jsonl").write_text(json.dumps({f"eval/{source}/avg_score": 2 * positives / total - 1}) + "\n")


@pytest.fixture
def run_export(tmp_path) -> Path:
    export = tmp_path / "exports" / "beam-lora-16"
    for step, right in ((5, [2, 1, 0]), (10, [4, 2, 1])):
        grades = _graded({"aime2024": right, "aime2025": right})
        write_results(evaluation_dir(export, step), grades, compute_metrics(grades), extra={"step": step})
    (evaluation_dir(export, 15)).mkdir(parents=True)  # an evaluation still running: no metrics.json yet
    _skyrl_dump(export, 5, "aime2024", positives=60, total=240)
    _skyrl_dump(export, 10, "aime2024", positives=120, total=240)
    # Only the aggregated line for aime2025 at step 10: accuracy = (avg_score + 1) / 2.
    folder = export / "dumped_evals" / "global_step_10_evals"
    aggregated = json.loads((folder / "aggregated_results.jsonl").read_text())
    aggregated["eval/aime2025/avg_score"] = 0.5
    (folder / "aggregated_results.jsonl").write_text(json.dumps(aggregated) + "\n")
    lines = [{"step": s, "reward/avg_raw_reward": -0.8 + 0.1 * s, "generate/avg_num_tokens": 3000 + 100 * s} for s in range(1, 11)]
    lines.append({"step": 10, "reward/avg_raw_reward": 0.3})  # a requeued job redid step 10: the later line wins
    (export / TRAIN_METRICS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return export


def test_report_table_plot_and_summary(run_export, capsys):
    assert beam_slurm(["report", str(run_export)]) == 0
    out = capsys.readouterr().out
    assert "aime2024" in out and "aime2025" in out
    plot = run_export / "beam_evals" / "report.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    assert (run_export / "beam_evals" / "report.svg").read_text().lstrip().startswith("<?xml")
    summary = json.loads((run_export / "beam_evals" / "report.json").read_text())
    assert summary["plot"] == str(plot) and len(summary["runs"]) == 1
    summary = summary["runs"][0]
    assert summary["label"] == "beam-lora-16"  # one run outside a sweep: its name
    points = {(e["step"], e["data_source"], e["origin"]): e["accuracy"] for e in summary["evaluations"]}
    assert points[(5, "aime2024", "beam")] == pytest.approx((2 / 4 + 1 / 4 + 0) / 3)
    assert points[(10, "aime2025", "beam")] == pytest.approx((4 / 4 + 2 / 4 + 1 / 4) / 3)
    assert points[(5, "aime2024", "skyrl")] == pytest.approx(0.25)
    assert points[(10, "aime2024", "skyrl")] == pytest.approx(0.5)
    assert points[(10, "aime2025", "skyrl")] == pytest.approx(0.75)
    assert not any(step == 15 for step, _, _ in points)  # unfinished evaluation left out
    assert summary["train"]["10"]["reward/avg_raw_reward"] == pytest.approx(0.3)
    assert summary["train"]["10"]["generate/avg_num_tokens"] == pytest.approx(4000)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def test_report_json_of_nan_scores_is_valid_json(run_export, capsys):
    # SkyRL writes NaN where a dataset had no score (and a metric can be infinite): the report shows null, in --json
    # and in report.json alike, so jq and JavaScript read both.
    folder = run_export / "dumped_evals" / "global_step_10_evals"
    (folder / "aggregated_results.jsonl").write_text('{"eval/aime2025/avg_score": NaN}\n')
    with open(run_export / TRAIN_METRICS_FILE, "a") as handle:
        handle.write('{"step": 11, "reward/avg_raw_reward": NaN, "generate/avg_num_tokens": Infinity}\n')
    assert beam_slurm(["report", str(run_export), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out, parse_constant=_refuse_constant)
    written = json.loads((run_export / "beam_evals" / "report.json").read_text(), parse_constant=_refuse_constant)
    assert printed == written
    (run,) = printed["runs"]
    points = {(e["step"], e["data_source"], e["origin"]): e["accuracy"] for e in run["evaluations"]}
    assert points[(10, "aime2025", "skyrl")] is None and points[(10, "aime2024", "skyrl")] == pytest.approx(0.5)
    assert run["train"]["11"]["reward/avg_raw_reward"] is None and run["train"]["11"]["generate/avg_num_tokens"] is None
    assert [11, None] in run["series"]["reward"]


def _attempts(count: int):
    """A run's goodput ledger with `count` attempts of 1100 s each, one after the other."""
    from beam_slurm.launch.run_results import RunReport
    from beam_slurm.policy.goodput import AttemptLine, Ledger, Segment

    lines = []
    for i in range(count):
        t = 1200.0 * i
        phases = [("bring_up", 60), ("model_load", 60), ("productive", 780), ("checkpoint", 60), ("lost", 140)]
        segments, at = [], t
        for phase, seconds in phases:
            segments.append(Segment(phase, at, at + seconds, 2))
            at += seconds
        kind = "completed" if i == count - 1 else "notice"
        lines.append(AttemptLine("1234", str(i), t, at, 2, kind, 10 * (i + 1), segments))
    return RunReport(export_path=Path("/x"), name="beam-lora", goodput=Ledger(timeline=lines))


@pytest.mark.parametrize("count", [1, 3, 8])
def test_timeline_legend_below_the_x_label_labels_inside_no_empty_band(count):
    import matplotlib.pyplot as plt

    from beam_slurm.verbs.report import timeline_figure

    fig = timeline_figure([_attempts(count)])
    try:
        renderer = fig.canvas.get_renderer()
        fig.draw(renderer)
        (ax,) = fig.axes
        legend = (fig.legends or [ax.get_legend()])[0].get_window_extent(renderer)
        xlabel = ax.xaxis.label.get_window_extent(renderer)
        assert not legend.overlaps(xlabel) and legend.y1 <= xlabel.y0  # below it
        frame = ax.get_window_extent(renderer)
        ends = [text for text in ax.texts if "step" in text.get_text()]
        assert len(ends) == count and all(frame.x0 <= e.get_window_extent(renderer).x1 <= frame.x1 for e in ends)
        drawn = fig.get_tightbbox(renderer)  # inches
        height = fig.get_size_inches()[1]
        assert drawn.height / height > 0.9, (drawn, height)
        assert height < 0.6 * count + 2.5  # the figure fits the attempts
    finally:
        plt.close(fig)


def test_report_finds_a_run_by_name(run_export, tmp_path, capsys):
    plot = tmp_path / "plots" / "curve.png"
    assert beam_slurm(["report", "beam-lora-16", "--exports-root", str(run_export.parent), "--plot", str(plot)]) == 0
    assert plot.is_file()


def test_report_finds_the_export_path_inside_a_run_folder(tmp_path, run_export, capsys):
    assert beam_slurm(["report", str(run_export.parent.parent)]) == 0


def test_report_unknown_run_is_status_2(tmp_path, capsys):
    assert beam_slurm(["report", "no-such-run", "--exports-root", str(tmp_path)]) == 2
    assert "no evaluations found for run 'no-such-run'" in capsys.readouterr().err


def test_rehearsal_numbers_are_marked(tmp_path, capsys):
    from beam_slurm.launch import run_results
    from beam_slurm.verbs import report

    export = tmp_path / "exports"
    export.mkdir()
    (export / "train_metrics.jsonl").write_text('{"step": 1, "reward/avg_raw_reward": 0.5, "rehearsal": true}\n')
    marked = run_results.gather(export)
    assert marked.rehearsal and "REHEARSAL" in marked.rehearsal_note and report.summary(marked)["rehearsal"]
    (export / "train_metrics.jsonl").write_text('{"step": 1, "reward/avg_raw_reward": 0.5}\n')
    assert not run_results.gather(export).rehearsal


def test_report_into_a_closed_pipe_ends_quietly_with_141(run_export):
    read, write = os.pipe()
    os.close(read)  # `beam-slurm report RUN | head`, head gone
    try:
        done = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "report", str(run_export)], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_an_in_job_restart_is_drawn_under_its_attempt_phase_by_phase():
    """The restart's phases (goodput.restart_phases) as a strip from the fault on, its total written at its end."""
    import matplotlib.pyplot as plt

    from beam_slurm.verbs.report import RESTART_COLOURS, timeline_figure

    report = _attempts(2)
    second = report.goodput.timeline[1]
    phases = {"detection": 0.6, "stopping": 1.5, "bring_up": 3.0, "model_load": 5.5, "first_step": 1.0}
    second.restart = {"warm": True, "why": "", **phases, "total": 11.6, "resumed_steps": 4,
                      "fault_at": second.start - 2.1}
    fig = timeline_figure([report])
    try:
        (ax,) = fig.axes
        strip = [p for p in ax.patches if p.get_height() < 0.2]
        colours = [RESTART_COLOURS[name] for name in phases]
        assert [matplotlib_colour(p) for p in strip] == [matplotlib_colour(c) for c in colours]
        assert [round(p.get_width(), 2) for p in strip] == list(phases.values())
        assert strip[0].get_x() == pytest.approx(second.start - 2.1)  # seconds since the first allocation (0 here)
        assert any(t.get_text().strip() == "warm restart 11.6 s" for t in ax.texts)
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert "restart: detection" in labels and "restart: first step" in labels
    finally:
        plt.close(fig)
    plain = timeline_figure([_attempts(2)])
    try:
        assert not [p for p in plain.axes[0].patches if p.get_height() < 0.2]
        assert "restart: detection" not in [t.get_text() for t in plain.legends[0].get_texts()]
    finally:
        plt.close(plain)


def matplotlib_colour(value) -> tuple:
    from matplotlib.colors import to_rgba

    return to_rgba(value.get_facecolor() if hasattr(value, "get_facecolor") else value)
