"""The preflight's write probe: real bytes written and fsynced into the checkpoint folder, the nodes' figures
gathered into the attempt folder, and the warning when a save at the measured speed breaks the notice budget."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from beam_slurm.jobs.training import storage_probe
from beam_slurm.jobs.training.preflight import RESULT_PREFIX, PreflightSettings


def test_probe_stops_at_its_byte_bound_and_leaves_nothing(tmp_path):
    measure = storage_probe.measure_write(tmp_path / "ckpt" / ".beam", 60, max_bytes=8 * 1024 * 1024)
    assert measure["bytes"] == 8 * 1024 * 1024
    assert measure["gbytes_per_s"] > 0
    assert measure["gbytes_per_s"] == pytest.approx(measure["bytes"] / measure["seconds"] / 1e9, rel=0.1, abs=2e-3)
    assert list((tmp_path / "ckpt" / ".beam").iterdir()) == []


def test_probe_stops_at_its_time_bound(tmp_path):
    # 1 TB could not be written here in 0.3 s: the clock ends it, after at least one durable chunk.
    measure = storage_probe.measure_write(tmp_path, 0.3, max_bytes=10**12)
    assert 0 < measure["bytes"] < 10**12 and measure["seconds"] >= 0.3


def test_preflight_node_reports_its_write_bandwidth(tmp_path):
    settings = PreflightSettings(ckpt_dir=str(tmp_path / "ckpt"), storage_probe_s=2.0)
    proc = subprocess.run([sys.executable, "-m", "beam_slurm.jobs.training.preflight", settings.to_json()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith(RESULT_PREFIX))
    record = json.loads(line[len(RESULT_PREFIX):])
    assert record["problems"] == [] and record["write"]["bytes"] > 0
    assert record["write"]["bytes"] == storage_probe.PROBE_BYTES or 2.0 <= record["write"]["seconds"] < 5.0
    gathered = storage_probe.gather(storage_probe.records_from_output(proc.stdout, RESULT_PREFIX), tmp_path)
    assert gathered == {record["host"]: record["write"]["gbytes_per_s"]}
    assert json.loads((tmp_path / storage_probe.RESULT_FILE).read_text())[record["host"]] == {"write": record["write"]}


def test_a_slow_node_breaks_the_budget_with_a_warning(log_lines):
    lines = log_lines
    assert storage_probe.check_budget({"n1": 2.0, "n2": 0.5}, save_bytes_per_node=100 * 10**9,
                                      save_window_s=150) is False
    assert lines[0].startswith("storage writes 0.50 GB/s per node at the slowest (n2), 2.00 at the fastest")
    assert "takes 200 s, more than the 150 s a notice leaves" in lines[1]
    assert "faster than 0.7 GB/s per node" in lines[1] and "cluster.signal_before_s" in lines[1]
    log_lines.clear()
    assert storage_probe.check_budget({"n1": 2.0}, save_bytes_per_node=100 * 10**9, save_window_s=150)
    quiet = log_lines
    assert len(quiet) == 1 and "warning" not in quiet[0]


def test_a_probe_of_zero_seconds_is_skipped(tmp_path):
    settings = PreflightSettings(ckpt_dir=str(tmp_path / "ckpt"), storage_probe_s=0.0)
    proc = subprocess.run([sys.executable, "-m", "beam_slurm.jobs.training.preflight", settings.to_json()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith(RESULT_PREFIX))[len(RESULT_PREFIX):])
    assert record["problems"] == [] and "write" not in record and "write_error" not in record, record
