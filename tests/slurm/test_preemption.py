"""How a preemption reaches a partition (beam_slurm.slurm.preemption): Slurm's own output read back, and the real
sandbox asked, where a preemption of `low` sends USR1 at once and kills 20 s later."""

from __future__ import annotations

import pytest

from beam_slurm.slurm import preemption

CONFIG = """Configuration data as of 2026-11-30T07:00:00
KillWait                = 10 sec
ProctrackType           = proctrack/cgroup
PreemptMode             = REQUEUE
PreemptType             = preempt/partition_prio
SlurmctldParameters     = enable_configless,preempt_send_user_signal
"""
PARTITIONS = (
    "PartitionName=batch Default=YES GraceTime=0 JobDefaults=(null) PreemptMode=OFF PriorityTier=1 State=UP\n"
    "PartitionName=low Default=NO GraceTime=00:01:30 PreemptMode=REQUEUE PriorityTier=1 State=UP\n")
QOS = "normal||cluster|00:00:00\nscavenger||CANCEL|00:02:00\nurgent|scavenger,normal|cluster|00:00:00\n"


def test_partition_preemption_read_from_slurm_output():
    low = preemption.from_outputs(CONFIG, PARTITIONS, "", "low")
    assert low.user_signal and low.kill_wait_s == 10 and low.partition_grace_s == 90
    assert low.proctrack == "proctrack/cgroup"
    assert low.preemptable() and low.mode() == "REQUEUE" and low.grace_s() == 90
    default = preemption.from_outputs(CONFIG, PARTITIONS, "", None)
    assert default.partition == "batch" and not default.preemptable()
    no_signal = preemption.from_outputs(CONFIG.replace("enable_configless,preempt_send_user_signal", "enable_configless"),
                                        PARTITIONS, "", "low")
    assert not no_signal.user_signal
    missing = preemption.from_outputs(CONFIG, PARTITIONS, "", "gpu")
    assert not missing.reachable and "no partition 'gpu'" in missing.why


def test_preemption_by_qos():
    config = CONFIG.replace("preempt/partition_prio", "preempt/qos")
    info = preemption.from_outputs(config, PARTITIONS, QOS, None)
    assert info.by_qos
    assert info.preemptors("scavenger") == ["urgent"] and info.preemptable("scavenger")
    assert info.mode("scavenger") == "CANCEL" and info.grace_s("scavenger") == 120
    assert info.preemptable(None)  # the default QOS `normal` is in urgent's list
    assert info.mode(None) == "REQUEUE"  # PreemptMode=cluster: slurm.conf's
    assert not info.preemptable("urgent")


def test_unreachable_slurm_is_said_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol here: a laptop
    info = preemption.read_preemption("low")
    assert not info.reachable and "scontrol not found" in info.why


@pytest.mark.sandbox
def test_the_sandbox_low_partition(slurm_sandbox, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_sandbox.slurm_conf))
    low = preemption.read_preemption("low")
    assert low.reachable, low.why
    assert low.preempt_type == "preempt/partition_prio" and low.user_signal
    assert low.preemptable() and low.grace_s() == 20 and low.mode() == "REQUEUE"
    assert not preemption.read_preemption("high").preemptable()
    assert not preemption.read_preemption("batch").preemptable()
