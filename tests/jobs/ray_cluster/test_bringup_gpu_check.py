"""The head's GPU visibility check waits in one batch however many nodes: the probes not yet launched go out together,
one wait covers them all, and probes the scheduler could not place go again together after one retry pause (not one
pause and one node list per node). Ray is stood in for by `RayDouble` from test_gpu_check_retry.py (a test double of
the few calls the check makes); the sandbox scenarios run the check on a real Ray."""

from __future__ import annotations

import pytest
from test_gpu_check_retry import GPUS, Clock, RayDouble, node

from beam_slurm.core.ray_records import NodeFailure
from beam_slurm.jobs.ray_cluster import checks

NODES = 8


def node_files(count: int) -> dict[int, dict]:
    return {i: {"host": f"n{i + 1}", "ip": f"10.0.0.{i + 1}", "gpus": GPUS} for i in range(count)}


class CountingRay(RayDouble):
    """RayDouble that also records, at each wait, how many probes it covers and how many were launched by then."""

    def __init__(self, alive: list[dict], unplaceable: set[str]):
        super().__init__(alive, unplaceable)
        self.waits: list[tuple[int, int]] = []
        self.node_lists = 0

    def wait(self, refs, num_returns, timeout):
        self.waits.append((len(refs), len(self.launched)))
        return super().wait(refs, num_returns, timeout)

    def nodes(self):
        self.node_lists += 1
        return super().nodes()


def name(index: int) -> str:
    return "w" + "abcdefgh"[index]  # no digit 0: the double reads names back from zero-padded hex ids


def cluster(count: int, unplaceable: set[str] = frozenset()) -> CountingRay:
    return CountingRay([node(name(i), f"10.0.0.{i + 1}") for i in range(count)], set(unplaceable))


def test_all_probes_go_out_in_one_batch_and_one_wait_covers_them():
    ray = cluster(NODES)
    clock = Clock()
    check = checks.GpuVisibilityCheck(ray, clock=clock, sleep=clock.sleep)
    check.finish(ray.alive, node_files(NODES))
    assert ray.waits == [(NODES, NODES)]
    assert sorted(ray.launched) == sorted(name(i) for i in range(NODES))
    assert clock.now == 0 and ray.node_lists == 0


def test_several_unplaceable_probes_go_again_together_after_one_pause():
    ray = cluster(NODES, unplaceable={"wb", "we", "wg"})
    clock = Clock()
    check = checks.GpuVisibilityCheck(ray, clock=clock, sleep=clock.sleep)
    original_get = ray.get

    def get(ref):
        if len(ray.launched) > NODES:  # the second batch: the scheduler's view caught up
            ray.unplaceable.clear()
        return original_get(ref)

    ray.get = get
    check.finish(ray.alive, node_files(NODES))
    assert clock.now == checks.RETRY_S and ray.node_lists == 1
    assert ray.waits == [(NODES, NODES), (3, NODES + 3)]
    assert sorted(ray.launched[NODES:]) == ["wb", "we", "wg"]


def test_nodes_that_never_come_back_are_named_together():
    ray = cluster(4, unplaceable={"wc", "wd"})
    clock = Clock()
    check = checks.GpuVisibilityCheck(ray, clock=clock, sleep=clock.sleep)
    alive = list(ray.alive)
    ray.alive = alive[:2]  # n3 and n4 left after their probes went out
    with pytest.raises(NodeFailure, match="nodes n3, n4: their Ray left the cluster during the GPU visibility check"):
        check.finish(alive, node_files(4))
