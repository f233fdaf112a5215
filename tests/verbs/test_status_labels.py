"""What `status` and `submit` say about a run's kind and its results: rehearsal runs are labelled as such, datasets by
what they are (AIME 2024's math_dapo as aime2024). No Slurm here: the runs' stages are skipped ones (no job ids, so
status asks no scheduler), the inputs are written by the product's own writers."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from beam_slurm.config.load import load_config, to_yaml
from beam_slurm.core.run_record import StageEntry
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.evaluation.metrics import compute_metrics
from beam_slurm.jobs.evaluation.results import evaluation_dir, write_results
from beam_slurm.launch.manifest import record_submission
from beam_slurm.launch.run_results import REHEARSAL_RUN
from beam_slurm.verbs import submit as submit_mod
from beam_slurm.verbs.status import collect, render_table, status_json


def _run(tmp_path: Path, name: str, overrides: list[str]) -> Path:
    """A run record whose stages were all skipped, with a math_dapo evaluation result and the AIME 2024 file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{"data_source": "math_dapo", "prompt": [{"role": "user", "content": "q"}],
                                          "reward_model": {"ground_truth": "1"}}]), data / "aime-2024-cleaned.parquet")
    cfg = load_config([*overrides, f"run_name={name}", f"paths.data_dir={data}",
                       f"paths.export_path={tmp_path / name}"], validate=False)
    store = RunStore(cfg.paths.export_path)
    record_submission(store, cfg, overrides=overrides, data_overrides=[], plans=[], dependency_type="afterok",
                      sweep_dir=None, config_yaml=to_yaml(cfg))
    store.update(lambda run: run.submissions[-1].stages.append(
        StageEntry(stage="train", status="skipped", reason="already at the last step")))
    grades = [{"data_source": "math_dapo", "problem_id": "0", "sample": s, "ground_truth": "1", "response": "1",
               "correct": s == 0, "pred": "1", "math_verify": s == 0} for s in range(2)]
    write_results(evaluation_dir(cfg.paths.export_path, 5), grades, compute_metrics(grades))
    return Path(cfg.paths.export_path)


def _render(rows, title: str) -> str:
    console = Console(width=250, record=True, file=open("/dev/null", "w"))
    console.print(render_table(rows, title))
    return console.export_text()


def test_status_labels_rehearsal_runs_and_aime2024(tmp_path):
    rehearsal = _run(tmp_path, "rehearsed", ["trainer.backend=rehearsal"])
    real = _run(tmp_path, "real", [])
    rows = collect([rehearsal, real])
    train = {r.run: r for r in rows if r.stage == "train"}
    assert train["rehearsed"].rehearsal is True and train["real"].rehearsal is False
    assert train["real"].evaluation == "step 5: aime2024 0.500"  # math_dapo named by its file
    text = _render(rows, "sweep")
    assert f"rehearsed: {REHEARSAL_RUN}" in text and "train (rehearsal)" in text
    assert text.count("(rehearsal)") == 1 and "math_dapo" not in text
    assert _render([r for r in rows if r.run == "real"], "run real").count("rehearsal") == 0


def test_submit_output_labels_a_rehearsal_run(run_env, capsys):
    root, data = run_env
    assert submit_mod.main(["--dry-run", "trainer.backend=rehearsal", *data]) == 0
    out = capsys.readouterr().out
    assert f"\n  {REHEARSAL_RUN}\n" in out
    assert submit_mod.main(["--dry-run", *data]) == 0
    assert REHEARSAL_RUN not in capsys.readouterr().out


def test_status_json_rows_carry_the_mark(tmp_path):
    rows = collect([_run(tmp_path, "rehearsed", ["trainer.backend=rehearsal"])])
    jobs = json.loads(json.dumps(status_json(rows, "run rehearsed")))["jobs"]
    assert jobs and all(job["rehearsal"] is True for job in jobs)
    train = next(job for job in jobs if job["stage"] == "train")
    assert train["evaluation"] == {"step": 5, "origin": "beam", "rehearsal": False, "accuracy": {"aime2024": 0.5}}
