"""`beam-slurm report` over several runs: one table, one figure (PNG + SVG), series per run in the JSON, runs labelled
by their swept settings, datasets by the file they came from (AIME 2024's math_dapo shows as aime2024), and the
rehearsal marks (a rehearsal run; an evaluation of a rehearsal export, marked by the results writer itself).

Every input is written by the product's own writers: the run record and resolved recipe (record_submission, to_yaml), the
evaluation results (resumable.write_task_results + refresh_view, as an array task writes them), the training metrics
(train_metrics.append_step_metrics), the rehearsal's HF export (rehearsal.export_hf)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aime_files import write_aime_parquet

from beam_slurm.cli import main as beam_slurm
from beam_slurm.config.load import load_config, to_yaml
from beam_slurm.core.run_store import RunStore
from beam_slurm.core.train_metrics import append_step_metrics
from beam_slurm.jobs.evaluation import resumable
from beam_slurm.jobs.evaluation.checkpoints import resolve_checkpoint
from beam_slurm.jobs.evaluation.generate import SamplingSettings
from beam_slurm.jobs.evaluation.metrics import compute_metrics
from beam_slurm.jobs.evaluation.problems import dataset_label, file_data_source, labels_by_source
from beam_slurm.jobs.evaluation.results import evaluation_dir, write_results
from beam_slurm.launch import run_results
from beam_slurm.launch.manifest import record_submission
from beam_slurm.verbs import report

TRUTHS = {"aime2025": ["70", "588", "16"], "math_dapo": ["45", "116", "540"]}
FILES = {"aime2025": "aime-2025-cleaned.parquet", "math_dapo": "aime-2024-cleaned.parquet"}


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """The prepared evaluation files: AIME 2024 keeps its source's data_source, math_dapo."""
    folder = tmp_path / "data"
    folder.mkdir()
    for source, name in FILES.items():
        write_aime_parquet(folder / name, data_source=source, ground_truths=TRUTHS[source],
                           prompts=[f"{source} problem {i}" for i in range(3)])
    return folder


def _grades(source: str, right: list[int], k: int = 4) -> list[dict]:
    """k graded responses per problem; the first right[i] of problem i are correct."""
    rows = []
    for problem, truth in enumerate(TRUTHS[source]):
        for sample in range(k):
            correct = sample < right[problem]
            pred = truth if correct else "1"
            rows.append({"data_source": source, "problem_id": f"p{problem}", "sample": sample, "ground_truth": truth,
                         "response": f"Answer: {pred}", "finish_reason": "stop", "correct": correct, "pred": pred,
                         "math_verify": correct})
    return rows


def _evaluate(export: Path, step: int, data_dir: Path, right: dict[str, list[int]], checkpoint: Path | None = None,
              model: dict | None = None) -> dict[str, dict]:
    """Write one checkpoint's evaluation the way an array task does: per dataset a task folder, then the view."""
    out = evaluation_dir(export, step)
    sampling = SamplingSettings.from_config(load_config([], validate=False))
    written = {}
    for source, file_name in FILES.items():
        path = data_dir / file_name
        identity = resumable.sampling_identity(model, None, f"sha-{source}", sampling)
        key = resumable.TaskKey(dataset_label(path, source), 4, identity)
        record = {"checkpoint": str(checkpoint) if checkpoint else None, "global_step": step, "dataset": key.dataset,
                  "data": [{"path": str(path), "problems": 3}], "fingerprint": {**identity, "k": 4}}
        written[key.dataset] = resumable.write_task_results(out, key, _grades(source, right[source]), record)
    resumable.refresh_view(out)
    return written


def _make_run(root: Path, name: str, overrides: list[str], data_dir: Path) -> Path:
    """A run folder as `submit` leaves it: run.json with the overrides, the resolved recipe as config.yaml."""
    cfg = load_config([*overrides, f"run_name={name}", f"paths.data_dir={data_dir}",
                       f"paths.export_path={root / name}"], validate=False)
    record_submission(
        RunStore(cfg.paths.export_path), cfg, overrides=overrides, data_overrides=[], plans=[], dependency_type="afterok", sweep_dir=None,
        config_yaml=to_yaml(cfg))
    return Path(cfg.paths.export_path)


SWEPT = {"bf16": ["recipe=lora_16gpu", "precision=bf16", "lora.rank=64"],
         "mxfp8": ["recipe=lora_16gpu", "precision=mxfp8", "lora.rank=0"]}
RIGHT = {"bf16": {5: {"aime2025": [1, 0, 0], "math_dapo": [2, 1, 0]}, 10: {"aime2025": [2, 1, 0], "math_dapo": [4, 2, 1]}},
         "mxfp8": {5: {"aime2025": [0, 0, 0], "math_dapo": [1, 1, 0]}, 10: {"aime2025": [4, 4, 1], "math_dapo": [4, 3, 3]}}}


@pytest.fixture
def sweep(tmp_path, data_dir) -> dict:
    """Two runs of a sweep (precision x LoRA rank), each with two evaluated checkpoints and ten training steps."""
    root = tmp_path / "exports"
    runs, expected = [], {}
    for point, overrides in SWEPT.items():
        export = _make_run(root, f"beam-{point}", overrides, data_dir)
        expected[point] = {step: _evaluate(export, step, data_dir, RIGHT[point][step]) for step in (5, 10)}
        for step in range(1, 11):
            append_step_metrics(export, step, {"reward/avg_raw_reward": -0.5 + 0.05 * step + (0.1 if point == "mxfp8" else 0),
                                               "generate/avg_num_tokens": 1000 + 10 * step})
        runs.append({"run_name": export.name, "choices": overrides[1:], "export_path": str(export)})
    sweep_dir = root / "beam_sweeps" / "beam-sweep"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "sweep.json").write_text(json.dumps({"overrides": ["recipe=lora_16gpu", "precision=bf16,mxfp8",
                                                                     "lora.rank=64,0"], "runs": runs}))
    return {"dir": sweep_dir, "expected": expected, "exports": [Path(r["export_path"]) for r in runs]}


def test_two_runs_of_a_sweep_on_one_figure_with_their_series(sweep, capsys):
    assert beam_slurm(["report", str(sweep["dir"]), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    png, svg = sweep["dir"] / "report.png", sweep["dir"] / "report.svg"
    assert payload["plot"] == str(png) and payload["svg"] == str(svg)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "<svg" in svg.read_text()
    assert json.loads((sweep["dir"] / "report.json").read_text()) == payload
    runs = payload["runs"]
    assert [r["label"] for r in runs] == ["precision=bf16 lora.rank=64", "precision=mxfp8 lora.rank=0"]
    assert runs[1]["settings"] == {"precision": "mxfp8", "lora.rank": "0"}
    for run, point in zip(runs, ("bf16", "mxfp8")):
        accuracy = run["series"]["accuracy"]
        assert list(accuracy) == ["aime2025", "aime2024"]  # by the file, never the source's math_dapo
        for dataset in ("aime2025", "aime2024"):
            line = accuracy[dataset]["beam"]
            assert [p["step"] for p in line] == [5, 10]
            for p in line:
                entry = next(iter(sweep["expected"][point][p["step"]][dataset].values()))
                assert p["avg@k"] == pytest.approx(entry["avg@k"]) and p["ci95"] == pytest.approx(entry["avg@k_ci95"])
                assert p["k"] == 4 and p["rehearsal"] is False
        assert run["series"]["reward"] == [[s, pytest.approx(-0.5 + 0.05 * s + (0.1 if point == "mxfp8" else 0))]
                                           for s in range(1, 11)]
        assert run["series"]["response_length"] == [[s, 1000 + 10 * s] for s in range(1, 11)]
        assert run["rehearsal"] is False
    # The two runs really differ where they were given different results.
    assert runs[1]["series"]["accuracy"]["aime2024"]["beam"][1]["avg@k"] == pytest.approx((4 + 3 + 3) / 12)
    assert runs[0]["series"]["accuracy"]["aime2024"]["beam"][1]["avg@k"] == pytest.approx((4 + 2 + 1) / 12)


def test_one_table_for_both_runs(sweep, capsys):
    assert beam_slurm(["report", str(sweep["dir"] / "sweep.json")]) == 0
    out = capsys.readouterr().out
    assert "precision=bf16 lora.rank=64" in out and "precision=mxfp8 lora.rank=0" in out
    assert "aime2024" in out and "math_dapo" not in out and "95% CI" in out
    assert "figure:" in out and (sweep["dir"] / "report.png").is_file()


def test_runs_given_one_by_one_are_labelled_by_their_differing_overrides(sweep, tmp_path, capsys):
    first, second = sweep["exports"]
    assert beam_slurm(["report", str(first), "beam-mxfp8", "--exports-root", str(first.parent), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in payload["runs"]] == ["precision=bf16 lora.rank=64", "precision=mxfp8 lora.rank=0"]
    assert payload["plot"] == str(first / "beam_evals" / "compare.png")  # not the run's own report.png
    assert Path(payload["svg"]).is_file()
    # --plot puts the figure (and its SVG and JSON) where asked.
    plot = tmp_path / "figures" / "bf16-vs-mxfp8.png"
    assert beam_slurm(["report", str(first), str(second), "--plot", str(plot)]) == 0
    assert plot.is_file() and plot.with_suffix(".svg").is_file() and plot.with_suffix(".json").is_file()


def test_labels_from_recipe_keys_when_no_override_differs(tmp_path, data_dir):
    """Runs whose overrides are equal (or absent) are told apart by the recipe keys that differ."""
    runs = []
    for temperature in ("0.6", "1.0"):
        export = _make_run(tmp_path / "exports", f"t{temperature}", [], data_dir)
        cfg = load_config([f"generation.temperature={temperature}", f"paths.data_dir={data_dir}"], validate=False)
        RunStore(export).write_config(to_yaml(cfg))  # same overrides, another recipe
        append_step_metrics(export, 1, {"reward/avg_raw_reward": 0.0})
        runs.append(run_results.gather(export))
    report.label_runs(runs)
    assert [r.label for r in runs] == ["generation.temperature=0.6", "generation.temperature=1.0"]


def test_aime2024_by_its_file_in_skyrl_dumps_and_older_results(tmp_path, data_dir, capsys):
    """SkyRL keys its dumps by data_source (math_dapo); results written before evaluations recorded their dataset
    carry only the data path in info.json. Both show as aime2024."""
    export = _make_run(tmp_path / "exports", "older", ["precision=bf16"], data_dir)
    dump = export / "dumped_evals" / "global_step_5_evals"
    dump.mkdir(parents=True)
    (dump / "math_dapo.jsonl").write_text("".join(json.dumps({"score": 1.0 if i < 3 else -1.0,
                                                              "data_source": "math_dapo"}) + "\n" for i in range(4)))
    (dump / "aggregated_results.jsonl").write_text(json.dumps({"eval/aime2025/avg_score": 0.0}) + "\n")
    grades = _grades("math_dapo", [2, 2, 0])
    write_results(evaluation_dir(export, 10), grades, compute_metrics(grades),
                  extra={"data": [{"path": str(data_dir / FILES["math_dapo"])}]})
    gathered = run_results.gather(export)
    assert {(p.step, p.dataset, p.origin) for p in gathered.evals} == {
        (5, "aime2024", "skyrl"), (5, "aime2025", "skyrl"), (10, "aime2024", "beam")}
    assert {p.data_source for p in gathered.evals if p.dataset == "aime2024"} == {"math_dapo"}  # the raw key kept
    assert beam_slurm(["report", str(export)]) == 0
    out = capsys.readouterr().out
    assert "aime2024" in out and "math_dapo" not in out


def test_labels_by_source_reads_each_file():
    assert file_data_source("/nonexistent/aime-2024-cleaned.parquet") is None


def test_labels_by_source_maps_math_dapo(data_dir):
    files = [data_dir / name for name in FILES.values()] + [data_dir / "missing.parquet"]
    assert labels_by_source(files) == {"aime2025": "aime2025", "math_dapo": "aime2024"}


# --- rehearsal ----------------------------------------------------------------------------------------------------

def _fake_hf_model(folder: Path) -> Path:
    """A folder that passes the checkpoint checks (config.json + weights file); nothing loads it here."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def test_evaluation_of_a_rehearsal_export_is_marked_in_its_metrics(tmp_path, data_dir, capsys):
    from beam_slurm.jobs.training.rehearsal import RehearsalSettings, export_hf
    from beam_slurm.verbs.status import _eval_at, _latest_eval

    base = _fake_hf_model(tmp_path / "base")
    export = _make_run(tmp_path / "exports", "rehearsed", ["precision=bf16"], data_dir)
    policy = export_hf(RehearsalSettings(export_path=str(export), policy_model_path=str(base)), 5)
    assert (policy / "rehearsal.json").is_file()
    real = _fake_hf_model(export / "global_step_10" / "policy")  # a real export: no marker
    for step, checkpoint in ((5, policy.parent), (10, real.parent)):
        eval_input = resolve_checkpoint(checkpoint)
        _evaluate(export, step, data_dir, RIGHT["bf16"][10], checkpoint=checkpoint, model=eval_input.describe())

    marked = evaluation_dir(export, 5)
    for metrics_file in [marked / "metrics.json", *marked.glob("tasks/*/metrics.json")]:
        metrics = json.loads(metrics_file.read_text())
        assert metrics and all(entry["rehearsal"] is True for entry in metrics.values()), metrics_file
    assert json.loads((marked / "info.json").read_text())["rehearsal"] is True
    unmarked = json.loads((evaluation_dir(export, 10) / "metrics.json").read_text())
    assert not any("rehearsal" in entry for entry in unmarked.values())
    assert "rehearsal" not in json.loads((evaluation_dir(export, 10) / "info.json").read_text())

    gathered = run_results.gather(export)
    assert {p.step for p in gathered.evals if p.rehearsal} == {5} and gathered.rehearsal
    assert "aime2024 0.583 (rehearsal)" in _eval_at(export, 5)[0] and "(rehearsal)" not in _eval_at(export, 10)[0]
    assert "(rehearsal)" not in _latest_eval(export)[0]  # step 10 is a real export's result
    assert _eval_at(export, 5)[1]["rehearsal"] is True and _latest_eval(export)[1]["rehearsal"] is False
    assert beam_slurm(["report", str(export), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert [p["rehearsal"] for p in run["series"]["accuracy"]["aime2024"]["beam"]] == [True, False]
    assert beam_slurm(["report", str(export)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "aime2024" in line]
    assert len(rows) == 2 and "(rehearsal)" in rows[0] and "(rehearsal)" not in rows[1]


def test_a_rehearsal_run_stays_marked_beside_a_real_one(sweep, tmp_path, data_dir, capsys):
    rehearsal = _make_run(tmp_path / "exports", "beam-rehearsal",
                          ["recipe=lora_16gpu", "precision=bf16", "lora.rank=64", "trainer.backend=rehearsal"], data_dir)
    append_step_metrics(rehearsal, 1, {"reward/avg_raw_reward": 0.1, "generate/avg_num_tokens": 900})
    assert beam_slurm(["report", str(sweep["exports"][0]), str(rehearsal), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["rehearsal"] for r in runs] == [False, True]
    assert [r["label"] for r in runs] == ["trainer.backend=skyrl", "trainer.backend=rehearsal [rehearsal]"]
    assert beam_slurm(["report", str(sweep["exports"][0]), str(rehearsal)]) == 0
    assert run_results.REHEARSAL_RUN in capsys.readouterr().out


def test_a_run_without_a_saved_recipe_is_known_as_rehearsal_by_its_metrics(tmp_path):
    """A run started with plain sbatch has no beam_run/config.yaml: the rehearsal's own metrics lines say what it is."""
    export = tmp_path / "exports" / "by-hand"
    append_step_metrics(export, 1, {"reward/avg_raw_reward": 0.2, "rehearsal": True})
    assert run_results.is_rehearsal_run(export) and run_results.gather(export).rehearsal
    other = tmp_path / "exports" / "real"
    append_step_metrics(other, 1, {"reward/avg_raw_reward": 0.2})
    assert not run_results.is_rehearsal_run(other) and not run_results.is_rehearsal_run(tmp_path / "nothing-here")
