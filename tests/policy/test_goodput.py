"""The goodput ledger from a run record, trainer events and allocation records written by hand: every node-second
in one phase, redone steps lost, a requeued job's two records, a spare beside the Ray step."""
from __future__ import annotations

from datetime import datetime

import pytest

from beam_slurm.core.run_record import Attempt, RunRecord, TrainJob
from beam_slurm.policy.goodput import PHASES, ledger, measured

T0 = datetime(2026, 12, 1, 10, 0, 0).timestamp()


def at(seconds: float) -> str:
    return datetime.fromtimestamp(T0 + seconds).strftime("%Y-%m-%dT%H:%M:%S")


def steps(label: str, first: int, last: int, start: float, step_s: float = 10.0, saves=()) -> list[dict]:
    """A load event, then each step's start and end (and a save of 2 s after the steps in `saves`)."""
    out, t = [{"t": T0 + start, "phase": "load", "step": first - 1, "attempt": label}], T0 + start + 20
    for step in range(first, last + 1):
        out += [{"t": t, "phase": "step", "step": step, "attempt": label},
                {"t": t + step_s, "phase": "saving", "step": step, "attempt": label}]
        t += step_s
        if step in saves:
            out.append({"t": t + 2, "phase": "after-save", "step": step, "attempt": label})
            t += 2
    return out


def test_a_requeue_that_redoes_steps_and_a_spare_are_accounted_to_the_second():
    # Job 5 on 3 nodes (one spare): attempt 0 from 0 s to 150 s, requeued (nothing saved after step 4), the second
    # instance from 160 s to 300 s; each attempt brings up 10 s, loads 20 s, steps of 10 s.
    first = Attempt(attempt=0, start_time=T0 + 1, end_time=T0 + 150, nodes=["n1", "n2"], end_kind="node-failure")
    second = Attempt(attempt=1, start_time=T0 + 161, end_time=T0 + 299, nodes=["n1", "n3"], end_kind="finished",
                     checkpoint_at_end=12)
    run = RunRecord(train_jobs={"5": TrainJob(job_id="5", attempts=[first, second])})
    events = steps("0", 1, 6, 10, saves=(4,)) + steps("1", 5, 12, 170, saves=(12,))
    events.append({"t": T0 + 170 + 20 + 80 + 2, "phase": "finished", "step": 12, "attempt": "1"})
    records = [{"JobID": "5", "State": "REQUEUED", "ElapsedRaw": "150", "NNodes": "3", "Submit": at(-30),
                "Start": at(0), "End": at(150)},
               {"JobID": "5", "State": "COMPLETED", "ElapsedRaw": "140", "NNodes": "3", "Submit": at(150),
                "Start": at(160), "End": at(300)}]
    result = ledger(run, events, records, now=T0 + 400)
    phases = result.phases
    assert set(phases) == set(PHASES)
    assert result.allocated_node_seconds == (150 + 140) * 3
    assert sum(phases.values()) == pytest.approx(result.allocated_node_seconds, abs=1)
    # every step once productive (12 x 10 s x 2 nodes); steps 5 and 6 of the first attempt were redone
    assert phases["productive"] == pytest.approx(12 * 10 * 2)
    assert phases["lost"] == pytest.approx(2 * 10 * 2 + (150 - 92) * 2)  # and what ran on unsaved until the kill
    assert phases["model_load"] == pytest.approx(2 * 20 * 2)
    assert phases["checkpoint"] == pytest.approx(2 * 2 * 2)
    assert phases["spare"] == pytest.approx((149 + 138) * 1)
    assert result.queue_wait_seconds == pytest.approx(30 + 10)
    assert result.ratio == pytest.approx(phases["productive"] / result.allocated_node_seconds)
    assert [line.attempt for line in result.timeline] == ["0", "1"]
    assert result.summary(8).startswith("goodput 27.6 % of 1.93 GPU-h allocated; largest losses: spare")


def test_without_accounting_the_run_records_spans_stand_in():
    only = Attempt(attempt=0, start_time=T0, end_time=T0 + 100, nodes=["n1"], end_kind="finished")
    run = RunRecord(train_jobs={"9": TrainJob(job_id="9", attempts=[only])})
    finished = {"t": T0 + 55, "phase": "finished", "step": 3, "attempt": "0"}
    result = ledger(run, steps("0", 1, 3, 5) + [finished], [], now=T0 + 200)
    assert result.accounting == "run record" and result.allocated_node_seconds == pytest.approx(100)
    assert result.phases["productive"] == pytest.approx(30) and result.phases["stopping"] == pytest.approx(45)


def test_plan_advice_reads_the_runs_own_medians_and_interruptions():
    first = Attempt(attempt=0, start_time=T0 + 1, end_time=T0 + 150, nodes=["n1", "n2"], end_kind="node-failure")
    second = Attempt(attempt=1, start_time=T0 + 161, end_time=T0 + 299, nodes=["n1", "n2"], end_kind="finished")
    run = RunRecord(train_jobs={"5": TrainJob(job_id="5", attempts=[first, second])})
    events = steps("0", 1, 6, 10, saves=(4,)) + steps("1", 5, 12, 170, saves=(12,))
    records = [{"JobID": "5", "State": "REQUEUED", "ElapsedRaw": "150", "NNodes": "2", "Submit": at(0),
                "Start": at(0), "End": at(150)},
               {"JobID": "5", "State": "COMPLETED", "ElapsedRaw": "140", "NNodes": "2", "Submit": at(150),
                "Start": at(160), "End": at(300)}]
    m = measured(ledger(run, events, records, now=T0 + 400))
    assert (m.attempts, m.faults) == (2, 1)
    assert m.step_s == pytest.approx(10) and m.save_s == pytest.approx(2) and m.model_load_s == pytest.approx(20)
    assert m.bring_up_s == pytest.approx(10)
    assert m.interruptions_per_day == pytest.approx(1 / ((149 + 138) / 86400), rel=0.01)


def test_an_in_job_restart_carries_its_phases_into_the_timeline():
    """The timeline picture draws a restart's phases from the fault on: the ledger's line of an in-job attempt holds
    them (goodput.restart_phases) and the fault's time; a cold first attempt holds none."""
    first = Attempt(attempt=0, start_time=T0 + 1, end_time=T0 + 80, nodes=["n1", "n2"], end_kind="node-failure")
    times = {"warm": True, "why": "warm", "fault_at": T0 + 78, "decided_at": T0 + 79, "stopped_at": T0 + 81,
             "ready_at": T0 + 84}
    second = Attempt(attempt=0, in_job=1, start_time=T0 + 80, end_time=T0 + 200, nodes=["n1", "n2"],
                     end_kind="finished", checkpoint_at_end=8, restart=times)
    run = RunRecord(train_jobs={"5": TrainJob(job_id="5", attempts=[first, second])})
    events = steps("0", 1, 4, 5) + steps("0.1", 3, 8, 65)
    records = [{"JobID": "5", "State": "COMPLETED", "ElapsedRaw": "200", "NNodes": "2", "Submit": at(0),
                "Start": at(0), "End": at(200)}]
    lines = ledger(run, events, records, now=T0 + 300).timeline
    assert [line.attempt for line in lines] == ["0", "0.1"] and lines[0].restart == {}
    restart = lines[1].restart
    assert restart["fault_at"] == T0 + 78 and restart["warm"] is True
    assert (restart["detection"], restart["stopping"], restart["bring_up"]) == (1.0, 2.0, 3.0)
    assert restart["model_load"] == pytest.approx(65 + 20 - 84) and restart["first_step"] == pytest.approx(10)
