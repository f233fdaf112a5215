"""The typed run record and its one store: today's run.json reads as it is, unknown keys survive a rewrite, and
concurrent writers lose no update when flock does nothing (as on Lustre with localflock or BeeGFS)."""
from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

from beam_slurm.core import layout
from beam_slurm.core.run_record import SCHEMA_VERSION, Attempt, BadNode, RecordError, RunRecord, to_json
from beam_slurm.core.run_store import RunStore

# A record as the first layout wrote it (no schema_version), with a key this version does not know.
VERSION_1 = {
    "run_name": "beam_lora_16gpu", "recipe": "lora_16gpu", "export_path": "/x", "ckpt_path": "/c", "log_dir": "/l",
    "max_training_steps": 80, "overrides": ["recipe=lora_16gpu"], "data_overrides": [], "sweep_dir": None,
    "submissions": [{"submitted_at": "t", "dependency_type": "afterok",
                     "stages": [{"stage": "train", "status": "submitted", "job_id": "501", "reason": None,
                                 "identity": "train:/c", "depends_on": ["500"], "command": "sbatch x"}]}],
    "train_jobs": {"501": {"job_id": "501", "started_by": "beam-slurm submit", "partition": "batch",
                           "nodes_needed": 2, "user_exclude": [], "excluded_nodes": ["n3"], "outcome": None,
                           "attempts": [{"attempt": 0, "start": "t", "start_time": 1.0, "nodes": ["n1", "n2"],
                                         "checkpoint_at_start": None, "end": "t2", "end_kind": "notice",
                                         "saved_step": 5, "checkpoint_at_end": 5, "counts_against_progress": False,
                                         "decision": "requeue", "exit_status": None, "hand_added": 1}]}},
    "wanted": {"action": "stop", "job_id": "501", "requested_at": "t", "requested_time": 2.0, "by": "u",
               "timeout_s": 30.0, "handled_by_attempt": None},
    "bad_nodes": [{"node": "n3", "reason": "raylet died", "job_id": "501", "attempt": 0, "time": "t"}],
    "tracking": {"logger": "wandb", "wandb_run_id": "abcd1234", "chosen_by_job": "501", "chosen_at": "t"},
    "from_a_newer_version": {"kept": True},
}


def test_todays_record_reads_typed_and_writes_back_every_key(tmp_path):
    store = RunStore(tmp_path)
    store.dir.mkdir()
    store.run_file.write_text(json.dumps(VERSION_1))
    record = store.read()
    job = record.train_jobs["501"]
    assert job.excluded_nodes == ["n3"] and job.attempts[0].saved_step == 5 and job.attempt(0).ended
    assert record.submissions[0].stages[0].depends_on == ["500"] and record.wanted_for("501").action == "stop"
    assert record.bad_node_names("501") == ["n3"] and record.tracking.wandb_run_id == "abcd1234"
    assert record.job_ids() == {"501"} and record.latest_train_job() is job
    store.update(lambda run: None)
    written = json.loads(store.run_file.read_text())
    assert written["schema_version"] == SCHEMA_VERSION
    assert written["from_a_newer_version"] == {"kept": True}
    assert written["train_jobs"]["501"]["attempts"][0]["hand_added"] == 1
    assert holds(written, VERSION_1), "a key or value of the old record changed on the way through"


def holds(written, original) -> bool:
    """Every key and value of `original` is in `written` (which may add keys this version writes)."""
    if isinstance(original, dict):
        return isinstance(written, dict) and all(k in written and holds(written[k], v) for k, v in original.items())
    if isinstance(original, list):
        return isinstance(written, list) and len(written) == len(original) and all(map(holds, written, original))
    return written == original


def test_a_record_from_a_newer_version_or_not_a_record_is_a_clear_error(tmp_path):
    store = RunStore(tmp_path)
    store.dir.mkdir()
    store.run_file.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(RecordError, match="newer"):
        store.read()
    store.run_file.write_text(json.dumps({"train_jobs": ["not", "an", "object"]}))
    with pytest.raises(RecordError, match=r"run.json.train_jobs: expected an object") as error:
        store.read()
    assert error.value.exit_code == 2 and "fix:" in str(error.value)
    store.run_file.write_text("{half")
    with pytest.raises(RecordError, match="cannot be read"):
        store.read()
    assert RunStore(tmp_path / "none").read() == RunRecord(), "no record yet: an empty one"


def _writer(export: str, who: str, count: int, start_at: float) -> None:
    import fcntl

    fcntl.flock = fcntl.lockf = lambda *args, **kwargs: None  # a file system that ignores flock
    store = RunStore(export)
    while time.time() < start_at:
        time.sleep(0.001)
    for i in range(count):
        store.update(lambda run: run.bad_nodes.append(BadNode(node=who, reason=str(i))))


def test_two_writers_at_once_lose_no_update_when_flock_does_nothing(tmp_path):
    store = RunStore(tmp_path)
    start_at = time.time() + 1.5
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(str(tmp_path), who, 40, start_at)) for who in ("a", "b")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    assert [w.exitcode for w in writers] == [0, 0]
    entries = [(b.node, b.reason) for b in store.read().bad_nodes]
    assert sorted(entries) == sorted((who, str(i)) for who in "ab" for i in range(40)), len(entries)
    assert not (store.dir / layout.RUN_LOCK_FILE).exists(), "the lock is released after the last update"


def test_a_lock_left_by_a_dead_writer_on_this_host_is_taken_over_at_once(tmp_path):
    store = RunStore(tmp_path, stale_after=600)
    store.update(lambda run: None)
    dead = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    dead.start()
    dead.join()
    (store.dir / layout.RUN_LOCK_FILE).write_text(json.dumps(
        {"host": os.uname().nodename, "pid": dead.pid, "pid_start": "1", "token": "t", "acquired_at": 0.0}))
    began = time.monotonic()
    store.update(lambda run: run.train_job("7").attempts.append(Attempt(attempt=0)))
    assert time.monotonic() - began < 5 and store.read().train_jobs["7"].attempts[0].attempt == 0


def test_to_json_is_what_the_record_holds():
    record = RunRecord(run_name="r")
    record.train_job("5").attempts.append(Attempt(attempt=1, nodes=["n1"]))
    data = to_json(record)
    assert data["train_jobs"]["5"]["attempts"][0]["nodes"] == ["n1"] and data["wanted"] is None
    assert "extra" not in data and "extra" not in data["train_jobs"]["5"]
