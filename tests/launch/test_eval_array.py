"""The evaluation array's decisions without Slurm (what `beam_slurm.launch.eval_array.plan` submits) and the
signal shield of a task (real processes and signals; no model loads).

The array's Slurm path, preemption and requeue run on the sandbox in test_eval_array_sandbox.py."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from aime_files import write_aime_parquet

from beam_slurm.config.load import load_config
from beam_slurm.jobs.evaluation import resumable
from beam_slurm.launch import eval_array as array
from beam_slurm.launch import sweep


def fake_export(path: Path) -> Path:
    """An HF export's files (contents irrelevant: planning never loads them)."""
    policy = path / "policy"
    policy.mkdir(parents=True)
    (policy / "config.json").write_text("{}")
    (policy / "model.safetensors").write_bytes(b"")
    return path


def points(*overrides: str) -> list[tuple[list[str], object]]:
    return [(c.overrides, load_config(c.overrides, validate=False)) for c in sweep.expand(list(overrides))]


def test_a_checkpoints_datasets_are_one_task_and_k_values_share_their_samples(tmp_path):
    data = [write_aime_parquet(tmp_path / "aime-2025-cleaned.parquet", data_source="aime2025"),
            write_aime_parquet(tmp_path / "aime-2024-cleaned.parquet", data_source="aime2024")]
    exports = [fake_export(tmp_path / "run" / f"global_step_{s}") for s in (5, 10)]
    targets = [(str(e), None, tmp_path / "run" / "beam_evals" / e.name) for e in exports]
    found = array.plan(points("eval.responses_per_problem=2,8"), targets, lambda cfg: data, force=False)
    # Two checkpoints -> two array tasks; each holds both datasets, and k=2 and k=8 (same sampling) in one spec.
    assert len(found.to_submit) == 2 and not found.finished
    for (specs, params), (checkpoint, _, out) in zip(found.to_submit, targets):
        assert [s.checkpoint for s in specs] == [checkpoint] * 2 and [s.out_dir for s in specs] == [str(out)] * 2
        assert sorted(Path(s.data_file).name for s in specs) == sorted(p.name for p in data)
        assert all(s.ks == (2, 8) for s in specs)
        assert params["nodes"] == 2 and params["gpus_per_node"] == 8  # the recipe's TP8 x PP2

    # Another sampling setting is another sample store: its own task.
    hotter = array.plan(points("generation.temperature=0.6,1.0"), targets[:1], lambda cfg: data[:1], force=False)
    assert len(hotter.to_submit) == 2
    assert {s.overrides for specs, _ in hotter.to_submit for s in specs} == {
        ("generation.temperature=0.6",), ("generation.temperature=1.0",)}


def test_finished_task_keys_are_skipped_and_a_queued_task_is_not_submitted_twice(tmp_path, monkeypatch):
    data = [write_aime_parquet(tmp_path / "aime-2025-cleaned.parquet", data_source="aime2025")]
    export = fake_export(tmp_path / "run" / "global_step_5")
    out = tmp_path / "run" / "beam_evals" / "global_step_5"
    targets = [(str(export), None, out)]
    (specs, _), = array.plan(points("eval.responses_per_problem=4"), targets, lambda cfg: data, force=False).to_submit
    key = array.prepare(specs[0]).keys[0]
    (out / key.task_dir).mkdir(parents=True)
    (out / key.task_dir / "metrics.json").write_text("{}")
    found = array.plan(points("eval.responses_per_problem=4"), targets, lambda cfg: data, force=False)
    assert found.to_submit == [] and found.finished == [str(out / key.task_dir)]
    # A larger k is a new key (its task will reuse the saved responses).
    assert len(array.plan(points("eval.responses_per_problem=8"), targets, lambda cfg: data,
                          force=False).to_submit) == 1

    # A task recorded as submitted and still live in Slurm is left alone.
    (other,), = [s for s, _ in array.plan(points("eval.responses_per_problem=8"), targets, lambda cfg: data,
                                          force=False).to_submit]
    record = array._submitted_file(other)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"job_id": "77_0"}))
    from beam_slurm.slurm import submission

    monkeypatch.setattr(submission, "job_records",
                        lambda ids: {j: submission.JobRecord(j, state="RUNNING") for j in ids})
    queued = array.plan(points("eval.responses_per_problem=8"), targets, lambda cfg: data, force=False)
    assert queued.to_submit == [] and queued.active and "job 77_0" in queued.active[0]


def _child_waits(ready) -> None:
    ready.set()
    time.sleep(30)


def test_the_notice_reaches_the_task_and_not_the_processes_it_starts():
    """Slurm signals every process of a step; inside the shield, a child started with multiprocessing's spawn (as
    vLLM starts its engine) and a plain subprocess survive a USR2 sent to all of them, and the task's own handler
    runs."""
    caught: list[int] = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: caught.append(signum))
    context = multiprocessing.get_context("spawn")
    child = plain = None
    try:
        with array.notice_for_this_process_only():
            ready = context.Event()
            child = context.Process(target=_child_waits, args=(ready,))
            child.start()
            assert ready.wait(60)
            plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
            time.sleep(0.5)
            for pid in (os.getpid(), child.pid, plain.pid):
                os.kill(pid, signal.SIGUSR2)
            deadline = time.monotonic() + 10
            while not caught and time.monotonic() < deadline:
                time.sleep(0.05)
            assert caught == [signal.SIGUSR2]
            time.sleep(0.5)
            assert child.is_alive() and plain.poll() is None
        # Outside the shield the default action is back for new children: the shield is scoped.
        unshielded = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        time.sleep(0.5)
        os.kill(unshielded.pid, signal.SIGUSR2)
        assert unshielded.wait(10) == -signal.SIGUSR2
    finally:
        signal.signal(signal.SIGUSR2, previous)
        for process in (child, plain):
            if process is not None:
                process.kill()


def test_a_saved_chunk_reads_back_whole_when_a_response_holds_unicode_line_breaks(tmp_path):
    """JSON leaves U+2028, U+0085 and U+001C raw, and str.splitlines splits at them; random models write them."""
    store = resumable.SampleStore(tmp_path / "samples" / "aime-x")
    rows = [{"problem_id": "p0", "sample": s, "response": "a\u2028b\x85c\x1cd"} for s in range(3)]
    store.add_chunk(rows)
    assert store.responses() == rows and store.counts() == {"p0": 3}
