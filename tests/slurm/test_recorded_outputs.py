"""Slurm's own output as recorded from Slurm 22.05.8 and 24.11.5 on this machine (tests/slurm/fixtures/<version>/),
read back: `scontrol show job` (the fields the attempt runner reads; 22.05's `TRES=` became 24.11's
`ReqTRES=`/`AllocTRES=`, which nothing reads) and `scontrol show config` (the preemption signal: 22.05's
SlurmctldParameters, 24.11's PreemptParameters).

The 24.11 files come from `tools/slurm_sandbox.py up --slurm-version 24.11`; the 22.05 ones from a one-node 22.05
controller with the sandbox's settings (its partitions batch/low/high, partition_prio preemption, no GPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from beam_slurm.policy import attempt
from beam_slurm.slurm import preemption, scheduler
from beam_slurm.slurm.values import reported_seconds

FIXTURES = Path(__file__).with_name("fixtures")
VERSIONS = ["22.05", "24.11"]


def recorded(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_recordings_are_of_their_version(version):
    assert recorded(version, "version.txt").split()[1].startswith(version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["show_job_running.txt", "show_job_running_multiline.txt"])
def test_what_the_attempt_reads_of_a_running_job(version, name):
    """The fields the attempt runner reads (policy.attempt): state, node list, restarts, the time left."""
    info = scheduler.parse_job(recorded(version, name))
    assert info["JobState"] == "RUNNING" and info["JobName"] == "running"
    assert info["NodeList"] not in ("", "(null)") and info["Restarts"] == "0"
    assert attempt.time_left_s(info) is None, "TimeLimit=UNLIMITED"
    assert attempt.time_left_s({**info, "TimeLimit": "00:10:00"}) == 600 - reported_seconds(info["RunTime"])
    assert attempt.slurm_end_of_job(info, restart_count=0) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_what_the_attempt_reads_of_a_pending_job(version):
    info = scheduler.parse_job(recorded(version, "show_job_pending.txt"))
    assert info["JobState"] == "PENDING" and info["Reason"] == "Resources" and info["RunTime"] == "00:00:00"


def test_the_two_versions_print_tres_differently():
    """Nothing of the product reads TRES from `scontrol show job`; the difference is kept here as recorded."""
    old = scheduler.parse_job(recorded("22.05", "show_job_pending.txt"))
    new = scheduler.parse_job(recorded("24.11", "show_job_pending.txt"))
    assert "TRES" in old and "ReqTRES" not in old and "AllocTRES" not in old
    assert "TRES" not in new and new["AllocTRES"] == "(null)" and new["ReqTRES"].startswith("cpu=1,")


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
