"""The save-on-notice file protocol between the Slurm job and the trainer (beam_slurm.core.notice)."""

from __future__ import annotations

import json
import time

import pytest

from beam_slurm.core import notice


def _write_marker(ckpt, step):
    (ckpt / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
    (ckpt / "latest_ckpt_global_step.txt").write_text(str(step))


def test_request_is_pending_until_acknowledged(tmp_path):
    assert notice.pending_request(tmp_path) is None
    notice.request_save(tmp_path, "SIGUSR1 time limit")
    request = notice.pending_request(tmp_path)
    assert request["reason"] == "SIGUSR1 time limit"
    assert abs(request["time"] - time.time()) < 60
    assert notice.saved_since(tmp_path, request["time"]) is None

    _write_marker(tmp_path, 7)
    notice.acknowledge(tmp_path, 7)
    assert notice.saved_since(tmp_path, request["time"]) == 7
    assert notice.pending_request(tmp_path) is None
    ack = json.loads((tmp_path / ".beam" / "saved_on_notice").read_text())
    assert ack["global_step"] == 7 and ack["request_time"] == request["time"]


def test_acknowledge_refuses_before_marker_names_the_step(tmp_path):
    notice.request_save(tmp_path, "preempted")
    with pytest.raises(ValueError, match="latest_ckpt_global_step.txt names nothing"):
        notice.acknowledge(tmp_path, 3)
    _write_marker(tmp_path, 2)
    with pytest.raises(ValueError, match="names 2"):
        notice.acknowledge(tmp_path, 3)
    assert notice.pending_request(tmp_path) is not None


def test_old_acknowledgement_does_not_answer_a_new_request(tmp_path):
    notice.request_save(tmp_path, "first")
    _write_marker(tmp_path, 4)
    notice.acknowledge(tmp_path, 4)
    time.sleep(0.01)
    notice.request_save(tmp_path, "second")
    second = notice.pending_request(tmp_path)
    assert second is not None and second["reason"] == "second"
    assert notice.saved_since(tmp_path, second["time"]) is None


def test_clear_removes_protocol_files_only(tmp_path):
    notice.request_save(tmp_path, "x")
    _write_marker(tmp_path, 1)
    notice.acknowledge(tmp_path, 1)
    notice.clear(tmp_path)
    assert notice.pending_request(tmp_path) is None
    assert notice.saved_since(tmp_path, 0.0) is None
    assert (tmp_path / "global_step_1").is_dir()
    assert (tmp_path / "latest_ckpt_global_step.txt").read_text() == "1"
    notice.clear(tmp_path)  # idempotent


def test_unreadable_request_still_counts(tmp_path):
    (tmp_path / ".beam").mkdir()
    (tmp_path / ".beam" / "save_request").write_text("please save")
    request = notice.pending_request(tmp_path)
    assert request is not None and "unreadable" in request["reason"]


def test_no_temporary_files_left_behind(tmp_path):
    notice.request_save(tmp_path, "x")
    assert sorted(p.name for p in (tmp_path / ".beam").iterdir()) == ["save_request"]
