"""Slurm's own output as recorded from Slurm 22.05.8 and 24.11.5 on this machine (tests/slurm/fixtures/<version>/),
read back: `scontrol show job` (22.05's `TRES=`, 24.11's `ReqTRES=`/`AllocTRES=`, `(null)` before a job starts) and
`scontrol show config` (the preemption signal: 22.05's SlurmctldParameters, 24.11's PreemptParameters).

The 24.11 files come from `tools/slurm_sandbox.py up --slurm-version 24.11`; the 22.05 ones from a one-node 22.05
controller with the sandbox's settings (its partitions batch/low/high, partition_prio preemption, no GPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from beam_slurm.slurm import preemption, scheduler

FIXTURES = Path(__file__).with_name("fixtures")
VERSIONS = ["22.05", "24.11"]


def recorded(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_recordings_are_of_their_version(version):
    assert recorded(version, "version.txt").split()[1].startswith(version)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_running_job_holds_what_it_was_given(version):
    for name in ("show_job_running.txt", "show_job_running_multiline.txt"):
        info = scheduler.parse_job(recorded(version, name))
        assert info["JobState"] == "RUNNING" and info["JobName"] == "running"
        held = scheduler.allocated_tres(info)
        # --exclusive: the whole node's 8 CPUs, whatever the request said.
        assert held["cpu"] == "8" and held["node"] == "1" and held["mem"] == "100M", (name, held)
        assert scheduler.job_tres(info) == held


@pytest.mark.parametrize("version", VERSIONS)
def test_a_pending_job_holds_nothing_yet(version):
    info = scheduler.parse_job(recorded(version, "show_job_pending.txt"))
    assert info["JobState"] == "PENDING"
    assert scheduler.allocated_tres(info) == {}
    assert scheduler.job_tres(info) == {"cpu": "1", "mem": "100M", "node": "1", "billing": "1"}


def test_the_two_versions_print_tres_differently():
    old = scheduler.parse_job(recorded("22.05", "show_job_pending.txt"))
    new = scheduler.parse_job(recorded("24.11", "show_job_pending.txt"))
    assert "TRES" in old and "ReqTRES" not in old and "AllocTRES" not in old
    assert "TRES" not in new and new["AllocTRES"] == "(null)" and new["ReqTRES"].startswith("cpu=1,")
    running = scheduler.parse_job(recorded("24.11", "show_job_running.txt"))
    assert scheduler.parse_tres(running["AllocTRES"])["gres/gpu"] == "8", "24.11's sandbox nodes have 8 fake GPUs"


def test_parse_tres():
    assert scheduler.parse_tres("cpu=2,mem=200M,node=2,billing=2,gres/gpu=4") == {
        "cpu": "2", "mem": "200M", "node": "2", "billing": "2", "gres/gpu": "4"}
    assert scheduler.parse_tres("(null)") == {} and scheduler.parse_tres("") == {}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_preemption_signal_is_read_from_either_parameter(version):
    config = recorded(version, "show_config.txt")
    partitions = recorded(version, "show_partition.txt")
    low = preemption.from_outputs(config, partitions, "", "low")
    assert low.reachable and low.user_signal and low.preemptable() and low.grace_s() == 20
    assert low.mode() == "REQUEUE" and low.kill_wait_s == 10
    without = config.replace("preempt_send_user_signal", "(null)").replace("send_user_signal", "(null)")
    assert not preemption.from_outputs(without, partitions, "", "low").user_signal


def test_where_each_version_keeps_the_signal_parameter():
    old = scheduler.parse_config(recorded("22.05", "show_config.txt"))
    new = scheduler.parse_config(recorded("24.11", "show_config.txt"))
    assert old["SlurmctldParameters"] == "preempt_send_user_signal" and "PreemptParameters" not in old
    assert new["PreemptParameters"] == "send_user_signal" and new["SlurmctldParameters"] == "(null)"
