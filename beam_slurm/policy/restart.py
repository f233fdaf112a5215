"""How an in-job restart is carried out once `requeue.decide` chose one: warm (the head's Ray and the healthy nodes'
raylets stay up; only new nodes start a raylet and only they run the preflight; the driver restarts alone) or cold
(every node's Ray step stopped and brought up again, as on the allocation's first attempt). Pure: the caller says
which nodes' Ray steps still run; `plan_restart` says what to stop, what to start and where the checks run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPlan:
    """What the next in-job attempt does with the running Ray cluster."""

    warm: bool
    why: str  # why warm or cold, as the log and the run record say it
    ranks: tuple[str, ...]  # the next cluster's nodes in rank order (the head first)
    keep: tuple[str, ...] = ()  # nodes whose Ray runs on untouched (warm only)
    stop: tuple[str, ...] = ()  # running nodes to stop first: left out, or replaced (cold: every running one)
    start: tuple[str, ...] = ()  # nodes that start a Ray node, each after its preflight (cold: every node)

    @property
    def driver_only(self) -> bool:
        """A warm restart that starts no node: only the driver (and its actors) restart."""
        return self.warm and not self.start


def plan_restart(
    ranks: tuple[str, ...],
    running: tuple[str, ...],
    next_nodes: tuple[str, ...],
    failure_node: str | None = None,
    removed: tuple[str, ...] = (),
) -> RestartPlan:
    """The plan for restarting in the job on `next_nodes` (allocation order, from `requeue.in_job`).

    `ranks` is the running cluster's nodes in rank order (the head first), `running` those whose Ray step still runs,
    `failure_node` the node the attempt's failure names, `removed` the nodes Slurm took out of the job. The head keeps
    rank 0 and every kept node its rank; a new
    node takes the rank of the node it replaces, so the nodes' rendezvous files and the driver's placement stay as
    they were. Cold when the head's node is lost, left out or its Ray step ended (the GCS is gone with it), and when
    Slurm removed a node: its step was killed, but Ray's daemons may run on beyond the job's reach, joined to the
    head; only a new head disowns them."""
    head = ranks[0] if ranks else None
    cold = RestartPlan(
        warm=False, why="", ranks=next_nodes, stop=tuple(n for n in ranks if n in running), start=next_nodes
    )
    if head is None or len(next_nodes) != len(ranks):
        return _cold(cold, "the cluster changes size")
    if head not in next_nodes:
        return _cold(cold, f"the head's node {head} is left out")
    if head not in running:
        return _cold(cold, f"the head's Ray step on {head} ended")
    if failure_node == head:
        return _cold(cold, f"the failure is the head's ({head})")
    if removed:
        return _cold(cold, f"Slurm removed {','.join(removed)} from the job; its Ray may still run there")
    keep = tuple(n for n in ranks if n in running and n in next_nodes)
    gone = [n for n in ranks if n not in keep]  # their ranks are free
    new = [n for n in next_nodes if n not in keep]  # in allocation order: the spares first in line take them
    order = {n: i for i, n in enumerate(ranks)}
    for old, replacement in zip(gone, new, strict=True):
        order[replacement] = order.pop(old)
    next_ranks = tuple(sorted(order, key=order.__getitem__))
    stop = tuple(n for n in ranks if n in running and n not in keep)
    what = "the driver alone" if not new else f"a Ray node on {','.join(new)}"
    return RestartPlan(
        warm=True,
        why=f"warm: the head's Ray and {len(keep) - 1} other node(s) stay up; restarting {what}",
        ranks=next_ranks,
        keep=keep,
        stop=stop,
        start=tuple(new),
    )


def _cold(plan: RestartPlan, why: str) -> RestartPlan:
    return RestartPlan(warm=False, why=f"cold: {why}", ranks=plan.ranks, stop=plan.stop, start=plan.start)
