"""`requeue`/`stop` when the signal to the batch shell does not go out because the controller did not answer: the
wanted outcome written for it is withdrawn (nothing would ever handle it); after a timeout, when the signal may have
arrived, it stays for the batch shell to read. Slurm's answers are played by a TEST DOUBLE of the two scheduler
calls (`job_state`, `signal_batch`); the run record is the real store."""

from __future__ import annotations

import pytest

from beam_slurm.core.run_record import Wanted
from beam_slurm.core.run_store import RunStore
from beam_slurm.launch import run_control
from beam_slurm.slurm import outage, scheduler

REFUSED = "scancel --batch --signal=USR2 7 failed (1): slurm_load_jobs error: Unable to contact slurm controller"
TIMED_OUT = "scancel --batch --signal=USR2 7 failed (1): Socket timed out on send/recv operation"


@pytest.mark.parametrize(("detail", "kept"), [(REFUSED, False), (TIMED_OUT, True)])
def test_a_signal_that_did_not_go_out_withdraws_the_wanted_outcome(tmp_path, monkeypatch, capsys, run_env, detail,
                                                                   kept):
    export = tmp_path / "exports"
    earlier = Wanted(action="requeue", job_id="6", requested_at="then", requested_time=1.0, by="someone",
                     timeout_s=5.0)
    store = RunStore(export)
    store.update(lambda run: (run.train_job("7"), setattr(run, "wanted", earlier)))

    def no_answer(job_id, signal_name):
        raise scheduler.SlurmUnreachable(detail, outage.CONTROLLER)

    monkeypatch.setattr(scheduler, "job_state", lambda job_id: "RUNNING")
    monkeypatch.setattr(scheduler, "signal_batch", no_answer)
    assert run_control.main_for("stop", [str(export), "--timeout", "5"]) == 1
    err = capsys.readouterr().err
    assert "Slurm's controller (slurmctld) did not answer" in err and "Traceback" not in err
    wanted = store.read().wanted
    if kept:
        assert wanted is not None and wanted.action == "stop" and wanted.job_id == "7"
        assert "may not have been signalled (or it was" in err, err
    else:
        assert wanted == earlier, wanted
        assert "could not signal job 7's batch shell, the request withdrawn" in err, err
