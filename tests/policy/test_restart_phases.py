"""Where an in-job restart's seconds went (`goodput.restart_phases`) and how `status` says it."""
from __future__ import annotations

from beam_slurm.core.run_record import Attempt
from beam_slurm.policy.goodput import restart_phases
from beam_slurm.verbs.status import restart_text

TIMES = {"warm": True, "why": "warm: the head's Ray and 0 other node(s) stay up; restarting a Ray node on n3",
         "fault_at": 100.0, "decided_at": 100.5, "stopped_at": 102.0, "ready_at": 105.0}
EVENTS = [  # the trainer's phase changes: a step's event is its start
    {"attempt": "0", "phase": "step", "step": 4, "t": 90.0},
    {"attempt": "0.1", "phase": "load", "t": 105.5},
    {"attempt": "0.1", "phase": "step", "step": 5, "t": 107.0},
    {"attempt": "0.1", "phase": "step", "step": 6, "t": 108.25},
]


def restarted(**changes) -> Attempt:
    return Attempt(**{"attempt": 0, "in_job": 1, "start_time": 100.5, "restart": dict(TIMES), **changes})


def test_each_phase_from_the_fault_to_the_end_of_the_first_resumed_step():
    phases = restart_phases(restarted(), EVENTS)
    assert phases == {"warm": True, "why": TIMES["why"], "detection": 0.5, "stopping": 1.5, "bring_up": 3.0,
                      "model_load": 2.0, "first_step": 1.25, "total": 8.25, "resumed_steps": 2}
    assert restart_text(phases) == ("warm restart 8.2 s: detection 0.5, stopping 1.5, bring-up 3.0, model load 2.0, "
                                    "first step 1.2")


def test_a_phase_not_reached_yet_is_unknown_not_zero():
    times = {k: v for k, v in TIMES.items() if k != "ready_at"}
    phases = restart_phases(restarted(restart=times), EVENTS[:2])
    assert phases["bring_up"] is None and phases["model_load"] is None and phases["total"] is None
    assert phases["detection"] == 0.5 and phases["resumed_steps"] == 0
    assert "bring-up ?" in restart_text({**phases, "warm": False}) and restart_text(phases).startswith("warm restart:")


def test_only_an_in_job_attempt_that_recorded_its_restart_has_phases():
    assert restart_phases(restarted(in_job=0), EVENTS) == {}
    assert restart_phases(restarted(restart={}), EVENTS) == {}
