"""Warm or cold, which nodes keep their Ray, which start one (and run the preflight), which are stopped: the plan of
an in-job restart from the running cluster and the nodes `requeue.decide` chose."""
from __future__ import annotations

import pytest

from beam_slurm.policy.restart import plan_restart

CASES = [
    # (what happened, ranks, running, next nodes, failure node) -> (warm, ranks, keep, stop, start)
    ("a worker's Ray died, a spare takes its rank",
     ("n1", "n2", "n3"), ("n1", "n3"), ("n1", "n3", "n4"), "n2",
     (True, ("n1", "n4", "n3"), ("n1", "n3"), (), ("n4",))),
    ("a worker's Ray died, no spare: the same node starts again after its checks",
     ("n1", "n2"), ("n1",), ("n1", "n2"), "n2",
     (True, ("n1", "n2"), ("n1",), (), ("n2",))),
    ("a hang on the same nodes: the driver alone",
     ("n1", "n2"), ("n1", "n2"), ("n1", "n2"), None,
     (True, ("n1", "n2"), ("n1", "n2"), (), ())),
    ("a hang whose suspect is replaced by a spare: its running Ray is stopped first",
     ("n1", "n2", "n3"), ("n1", "n2", "n3"), ("n1", "n3", "n4"), None,
     (True, ("n1", "n4", "n3"), ("n1", "n3"), ("n2",), ("n4",))),
    ("two workers lost, two spares, ranks kept in order",
     ("n1", "n2", "n3", "n4"), ("n1", "n4"), ("n1", "n4", "n5", "n6"), "n2",
     (True, ("n1", "n5", "n6", "n4"), ("n1", "n4"), (), ("n5", "n6"))),
    ("the head's Ray step ended",
     ("n1", "n2"), ("n2",), ("n1", "n2"), "n1",
     (False, ("n1", "n2"), (), ("n2",), ("n1", "n2"))),
    ("the head's node left out for a spare",
     ("n1", "n2"), ("n1", "n2"), ("n2", "n3"), "n1",
     (False, ("n2", "n3"), (), ("n1", "n2"), ("n2", "n3"))),
    ("the failure is the head's though its step runs (a driver-side Ray error)",
     ("n1", "n2"), ("n1", "n2"), ("n1", "n2"), "n1",
     (False, ("n1", "n2"), (), ("n1", "n2"), ("n1", "n2"))),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_plan_of_each_restart(case):
    _, ranks, running, next_nodes, failure, (warm, new_ranks, keep, stop, start) = case
    plan = plan_restart(ranks, running, next_nodes, failure)
    assert (plan.warm, plan.ranks, plan.keep, plan.stop, plan.start) == (warm, new_ranks, keep, stop, start), plan
    assert plan.why.startswith("warm: " if warm else "cold: "), plan.why


def test_the_head_keeps_rank_0_and_every_kept_node_its_rank():
    plan = plan_restart(("h", "a", "b", "c"), ("h", "a", "c"), ("h", "a", "c", "s"), "b")
    assert plan.ranks == ("h", "a", "s", "c") and plan.start == ("s",)


def test_only_new_nodes_are_checked_and_a_driver_only_restart_checks_none():
    hang = plan_restart(("n1", "n2"), ("n1", "n2"), ("n1", "n2"))
    assert hang.driver_only and hang.start == () and "the driver alone" in hang.why
    spare = plan_restart(("n1", "n2"), ("n1",), ("n1", "n3"), "n2")
    assert not spare.driver_only and spare.start == ("n3",) and "a Ray node on n3" in spare.why


def test_why_a_restart_is_cold_is_said():
    assert plan_restart(("n1", "n2"), ("n2",), ("n1", "n2"), "n1").why == "cold: the head's Ray step on n1 ended"
    assert plan_restart(("n1", "n2"), ("n1", "n2"), ("n2", "n3")).why == "cold: the head's node n1 is left out"


def test_a_node_slurm_removed_from_the_job_makes_the_restart_cold():
    # Its step was killed, but Ray's daemons may run on there, still joined to the head: a new head disowns them.
    plan = plan_restart(("n1", "n2"), ("n1",), ("n1", "n3"), "n2", removed=("n2",))
    assert not plan.warm and plan.start == ("n1", "n3") and plan.stop == ("n1",)
    assert plan.why == "cold: Slurm removed n2 from the job; its Ray may still run there"
