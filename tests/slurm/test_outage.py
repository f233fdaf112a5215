"""Telling an outage (a Slurm daemon that did not answer) from any other failure, on what Slurm 22.05's clients
printed against the sandbox's slurm.conf copied with a closed SlurmctldPort, a closed AccountingStoragePort, and a
port that accepts and never answers (tests/verbs/test_outages_sandbox.py makes them)."""

from __future__ import annotations

import shutil
import socket
import sys

import pytest

from beam_slurm import cli
from beam_slurm.slurm import outage, scheduler

# (command, what it printed, the daemon that did not answer or None), recorded on the sandbox.
RECORDED = [
    ("squeue", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", outage.CONTROLLER),
    ("scontrol", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", outage.CONTROLLER),
    ("sinfo", "slurm_load_partitions: Unable to contact slurm controller (connect failure)", outage.CONTROLLER),
    (
        "scancel",
        "scancel: error: Kill job error on job id 5: Unable to contact slurm controller (connect failure)",
        outage.CONTROLLER,
    ),
    ("sbatch", "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
     outage.CONTROLLER),
    ("squeue", "slurm_load_jobs error: Socket timed out on send/recv operation", outage.CONTROLLER),
    ("scancel", "scancel: error: Kill job error on job id 99999: Socket timed out on send/recv operation",
     outage.CONTROLLER),
    (
        "/usr/bin/sacct",
        "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection to "
        "host:10.77.0.1:38199: Connection refused\nsacct: error: Sending PersistInit msg: Connection refused\n"
        "sacct: error: Problem talking to the database: Connection refused",
        outage.ACCOUNTING,
    ),
    ("sacctmgr", "sacctmgr: error: Sending PersistInit msg: Connection refused", outage.ACCOUNTING),
    # Answers, not outages: the daemon was reached and said no.
    ("scancel", "scancel: error: Kill job error on job id 999999: Invalid job id specified", None),
    ("sbatch", "sbatch: error: Batch job submission failed: Invalid partition name specified", None),
    ("scontrol", "slurm_load_jobs error: Invalid job id specified", None),
    ("sacct", "sacct: error: Unknown field 'StdOut'", None),
    # What scontrol requeue printed with no controller: too vague to call an outage.
    ("scontrol", "Unexpected message received for job 5", None),
]


@pytest.mark.parametrize(("command", "text", "daemon"), RECORDED)
def test_recorded_answers_are_classified(command, text, daemon):
    assert outage.unanswered(command, text) == daemon


def test_a_timeout_may_have_been_done():
    assert outage.timed_out("slurm_load_jobs error: Socket timed out on send/recv operation")
    assert not outage.timed_out("slurm_load_jobs error: Unable to contact slurm controller (connect failure)")


def test_the_message_names_the_daemon_and_what_to_do():
    error = scheduler.SlurmUnreachable("squeue failed (1): Unable to contact slurm controller", outage.CONTROLLER)
    assert isinstance(error, scheduler.SlurmCommandError)
    text = str(error)
    assert text.startswith("Slurm's controller (slurmctld) did not answer (squeue failed (1): Unable to contact")
    assert "retry later" in text and "`scontrol ping`" in text and "administrators" in text
    dbd = str(scheduler.SlurmUnreachable("sacct failed (1): Connection refused", outage.ACCOUNTING))
    assert dbd.startswith("Slurm's accounting daemon (slurmdbd) did not answer") and "administrators" in dbd


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(shutil.which("squeue") is None or shutil.which("sacct") is None, reason="no Slurm clients")
def test_real_clients_against_closed_ports_raise_unreachable(tmp_path, monkeypatch):
    """The real squeue and sacct, given a slurm.conf whose controller and accounting ports nothing listens on."""
    port = _closed_port()
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=outage\nSlurmctldHost=localhost\n"
        f"SlurmctldPort={port}\nAccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
        f"AccountingStoragePort={port}\nMessageTimeout=1\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1 Default=YES\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(conf))
    with scheduler.noting_outages() as outer:
        with pytest.raises(scheduler.SlurmUnreachable) as controller:
            scheduler.squeue_rows()
        with scheduler.noting_outages() as inner:
            assert scheduler.accounted_output("5") == {}  # sacct's failure is caught there, and noted
    assert controller.value.daemon == outage.CONTROLLER and not controller.value.maybe_done
    assert "Unable to contact slurm controller" in controller.value.detail
    assert [e.daemon for e in inner] == [outage.ACCOUNTING, outage.ACCOUNTING]  # with StdOut, then without it
    assert [e.daemon for e in outer] == [outage.CONTROLLER, outage.ACCOUNTING, outage.ACCOUNTING]


def test_a_command_past_its_timeout_is_unreachable_and_may_be_done():
    with pytest.raises(scheduler.SlurmUnreachable) as error:
        scheduler.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout_s=0.2)
    assert error.value.daemon == outage.CONTROLLER and error.value.maybe_done


def test_a_refusal_is_not_unreachable():
    with pytest.raises(scheduler.SlurmCommandError) as error:
        scheduler.run([sys.executable, "-c", "import sys; sys.exit('Invalid job id specified')"])
    assert not isinstance(error.value, scheduler.SlurmUnreachable)


def test_the_dispatcher_turns_an_outage_into_its_message(monkeypatch, capsys):
    """Any verb: an outage no verb answered for ends in one message and status 1, no traceback (the verb's main is
    replaced by a test double that raises)."""
    from beam_slurm.verbs import report

    def unreachable(argv):
        raise scheduler.SlurmUnreachable("sacct failed (1): Connection refused", outage.ACCOUNTING)

    monkeypatch.setattr(report, "main", unreachable)
    assert cli.main(["report", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("beam-slurm report: Slurm's accounting daemon (slurmdbd) did not answer")
    assert "Traceback" not in err
