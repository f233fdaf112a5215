"""Tables on a narrow terminal: `status` and `report` read COLUMNS (and the real terminal's width), keep words whole,
and `status` is titled with the run's name. No Slurm here: the run's stages are skipped ones (no job ids, so status
asks no scheduler), the inputs are written by the product's own writers; the verbs run as the user runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from beam_slurm.config.load import load_config, to_yaml
from beam_slurm.core.run_record import StageEntry
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.evaluation.metrics import compute_metrics
from beam_slurm.jobs.evaluation.results import evaluation_dir, write_results
from beam_slurm.launch.manifest import record_submission
from beam_slurm.verbs.status import StatusRow, render_table

REPO = Path(__file__).resolve().parents[2]
LONG_REASON = "DependencyNeverSatisfied: train job 12 FAILED; cancel it or resubmit after a fix"
ROWS = [StatusRow("r", "data", "10", "COMPLETED", 0, "00:00:31", "n1", "", "", "reused: /shared/data/dapo.parquet"),
        StatusRow("r", "train", "12", "COMPLETED", 1, "00:10:21", "n1,n2", "20 / 20", "step 20: aime2025 0.412", ""),
        StatusRow("r", "  attempt 0", "", "notice", 0, "", "n1,n2", "0 -> 10", "", "saved at step 10; the notice"),
        StatusRow("r", "evaluate 20", "13", "OUT_OF_MEMORY", 0, "00:10:21", "n3", "", "", LONG_REASON)]


def _text(width: int) -> str:
    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(render_table(ROWS, "run r", width))
    return console.export_text()


def test_status_keeps_every_word_whole_at_any_width():
    words = {w for r in ROWS for text in (r.state, r.reason, r.evaluation, r.checkpoint) for w in text.split()}
    for width in (60, 80, 100, 120, 160):
        text = _text(width)
        assert max(map(len, text.splitlines())) <= width, text
        shown = set(text.split())
        assert words <= shown, (width, sorted(words - shown), text)
    # Where the table fits, evaluation and reason are columns; where it cannot, they follow it, one line per job.
    assert re.search(r"checkpoint +evaluation +reason", _text(160))
    assert f"evaluate 20 13: {LONG_REASON}" in " ".join(_text(80).split())


def _run_with_results(tmp_path: Path) -> Path:
    """A run named `team-run` whose export folder is called `exports`, with two evaluated steps."""
    cfg = load_config(["run_name=team-run", f"paths.export_path={tmp_path / 'exports'}"], validate=False)
    store = RunStore(cfg.paths.export_path)
    record_submission(store, cfg, overrides=[], data_overrides=[], plans=[], dependency_type="afterok",
                      sweep_dir=None, config_yaml=to_yaml(cfg))
    store.update(lambda run: run.submissions[-1].stages.append(
        StageEntry(stage="train", status="skipped", reason="complete: the checkpoint marker is step 20 of 20 in "
                   "/shared/checkpoints/team-run/latest_ckpt_global_step.txt")))
    for step in (5, 10):
        grades = [{"data_source": source, "problem_id": str(p), "sample": s, "ground_truth": "1", "response": "1",
                   "correct": s == 0, "pred": "1", "math_verify": s == 0}
                  for source in ("aime2024", "aime2025") for p in range(3) for s in range(4)]
        write_results(evaluation_dir(cfg.paths.export_path, step), grades, compute_metrics(grades), extra={"step": step})
    return Path(cfg.paths.export_path)


def _beam(*args: str, columns: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    done = subprocess.run([sys.executable, "-m", "beam_slurm.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_status_and_report_read_COLUMNS_and_status_names_the_run(tmp_path):
    export = _run_with_results(tmp_path)
    status = _beam("status", str(export), columns="80")
    assert status.split("\n")[0].strip() == "run team-run", status  # the run's name, not its folder's
    assert max(map(len, status.splitlines())) <= 80 and "SKIPPED" in status.split(), status
    assert "/shared/checkpoints/team-run/latest_ckpt_global_step.txt" in status.split(), status
    wide = _beam("report", str(export), columns=None)
    narrow = _beam("report", str(export), columns="80")
    table = lambda out: [line for line in out.splitlines() if not line.startswith("figure:")]  # noqa: E731
    assert max(map(len, table(wide))) > 80 >= max(map(len, table(narrow))), narrow
    for word in ("aime2024", "aime2025", "timeouts", "0.250", "1.000", "[0.250,", "0.250]"):
        assert word in narrow.split(), (word, narrow)
