"""The preflight's cost stays flat in node count: the write probe ends near its time bound however slow the storage is
under all nodes' load, and it runs beside the fabric check (the step takes the longer of the two, not their sum)."""

from __future__ import annotations

import json
import os
import time

from beam_slurm.jobs.training import preflight, storage_probe
from beam_slurm.jobs.training.preflight import RESULT_PREFIX, PreflightSettings


def test_the_write_probe_ends_near_its_bound_on_slow_storage(tmp_path, monkeypatch):
    """Storage at 20 MB/s (fsync stands in for it, a test double of the device): one 64 MiB chunk alone would take
    3.4 s; the probe sizes its last chunks to the time left."""
    synced = {"bytes": 0}
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        size = os.fstat(fd).st_size
        time.sleep((size - synced["bytes"]) / 20e6)
        synced["bytes"] = size
        real_fsync(fd)

    monkeypatch.setattr(storage_probe.os, "fsync", slow_fsync)
    measure = storage_probe.measure_write(tmp_path, 1.0)
    assert 1.0 <= measure["seconds"] < 1.3, measure
    assert 0.01 < measure["gbytes_per_s"] < 0.03, measure


def test_the_write_probe_runs_beside_the_fabric_check(tmp_path, monkeypatch, capsys):
    """Both checks stand in as 1 s waits (test doubles of their timing); the node's step takes about 1 s, not 2."""

    def fabric_check(settings, environ=None):
        began = time.monotonic()
        return lambda: (time.sleep(max(1.0 - (time.monotonic() - began), 0)), {"host": "h", "problems": []})[1]

    def write_probe(ckpt_dir, max_seconds):
        time.sleep(1.0)
        return {"write": {"bytes": 1, "seconds": 1.0, "gbytes_per_s": 0.0}}

    monkeypatch.setattr(preflight.fabric, "start_node", fabric_check)
    monkeypatch.setattr(preflight.storage_probe, "probe_record", write_probe)
    settings = PreflightSettings(ckpt_dir=str(tmp_path / "ckpt"), storage_probe_s=1.0, fabric={"enabled": True})
    began = time.monotonic()
    assert preflight.main([settings.to_json()]) == 0
    took = time.monotonic() - began
    record = json.loads(capsys.readouterr().out.split(RESULT_PREFIX, 1)[1])
    assert record["write"]["bytes"] == 1 and record["fabric"] == {"host": "h", "problems": []}
    assert took < 1.6, took
