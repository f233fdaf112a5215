"""Checks of a node and of the assembled Ray cluster before the driver starts: the GPU count Slurm gave each node,
and that Ray hands every worker exactly the GPUs Slurm allocated (SkyRL issue 1577)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from beam_slurm.core.ray_records import NodeFailure
from beam_slurm.jobs.ray_cluster.gpus import compare_gpu_view, probe_gpu_view

# ray is imported inside the functions, on purpose: the checks run where Ray is already imported.

PROBE_TIMEOUT_S = 120  # for the visibility probe on every node together
RETRY_S = 0.5  # before a probe the scheduler could not place goes again


def registered_nodes(nodes: list[dict[str, Any]], node_files: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Rank -> the alive GCS entry of that node's raylet. A node file that names its Ray's folder (`ray_temp_dir`)
    matches only the raylet whose socket lies in it: after a warm restart on the same node the lost raylet, at the
    same address, stays "alive" in the GCS until its health checks run out, and must not stand for the new one."""
    found: dict[int, dict[str, Any]] = {}
    for rank, info in node_files.items():
        folder = info.get("ray_temp_dir")
        for node in nodes:
            if node.get("NodeManagerAddress") != info.get("ip") or not node.get("Alive", True):
                continue
            socket = node.get("RayletSocketName") or ""
            if folder and socket and not socket.startswith(folder.rstrip("/") + "/"):
                continue  # an earlier raylet at this address
            found[rank] = node
    return found


def check_gpu_count(host: str, gpus: list[str], source: str, expected: int | None) -> None:
    """NodeFailure('setup') unless Slurm gave this node's step `expected` GPUs (no check when None)."""
    if expected is not None and len(gpus) != expected:
        source = source or "CUDA_VISIBLE_DEVICES/SLURM_STEP_GPUS/SLURM_JOB_GPUS (none set)"
        raise NodeFailure(
            "setup",
            f"node {host}: Slurm gave this step {len(gpus)} GPUs (from {source}) but the job "
            f"expects {expected} per node; request them with --gpus-per-node={expected} "
            f"(or --gres=gpu:{expected})",
        )


class GpuVisibilityCheck:
    """One probe per node with all its GPUs, launched as soon as the node registered, while the other nodes join (its
    worker's start-up is hidden behind theirs, and a bad node fails the job before the rest joined); `finish` waits
    for all of them in one wait, and probes the scheduler could not place go again together, however many."""

    def __init__(
        self,
        ray: Any,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        ranks: set[int] | None = None,
    ):
        from ray.exceptions import TaskUnschedulableError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray = ray
        self.strategy = NodeAffinitySchedulingStrategy
        self.unschedulable: type[Exception] = TaskUnschedulableError
        self.probe = ray.remote(probe_gpu_view)
        self.pending: dict[Any, dict[str, Any]] = {}
        self.node_of: dict[Any, str] = {}  # the NodeID each probe was sent to
        self.launched: set[str] = set()
        self.passed: set[str | None] = set()  # addresses whose probe saw the right GPUs
        self.clock, self.sleep = clock, sleep
        self.ranks = ranks  # the nodes to probe (a warm restart: the new ones); None: all

    def launch_ready(self, nodes: list[dict[str, Any]], node_files: dict[int, dict[str, Any]]) -> None:
        """Start the probe on every alive node with GPUs and a registration file that has none yet."""
        for rank, node in registered_nodes(nodes, node_files).items():
            info = node_files[rank]
            count = int(node.get("Resources", {}).get("GPU", 0))
            if (self.ranks is not None and rank not in self.ranks) or count == 0 or node["NodeID"] in self.launched:
                continue
            strategy = self.strategy(node_id=node["NodeID"], soft=False)
            ref = self.probe.options(num_gpus=count, num_cpus=0, scheduling_strategy=strategy).remote()
            self.pending[ref] = info
            self.node_of[ref] = node["NodeID"]
            self.launched.add(node["NodeID"])

    def finish(self, nodes: list[dict[str, Any]], node_files: dict[int, dict[str, Any]]) -> None:
        """Launch the probes not yet launched, wait for all of them together; NodeFailure naming the first node whose
        view differs. Probes the scheduler could not place go again together, after one RETRY_S."""
        self.launch_ready(nodes, node_files)
        ray, pending = self.ray, self.pending
        deadline = self.clock() + PROBE_TIMEOUT_S
        while pending:
            left = max(deadline - self.clock(), 0.0)
            ready, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=left)
            if not_ready and not ready:
                names = ", ".join(pending[ref]["host"] for ref in not_ready)
                raise NodeFailure(
                    "infra", f"the GPU visibility probe did not run on {names} within {PROBE_TIMEOUT_S} s"
                )
            unplaced: list[dict[str, Any]] = []
            for ref in ready:
                info = pending.pop(ref)
                try:
                    view = ray.get(ref)
                except self.unschedulable:
                    # The node is in the GCS's table but not (yet, or no longer) in the scheduler's view: seen under
                    # load just after it joined, and when its raylet left to retry on the next port block. Its
                    # probe goes again to the node alive at its address now.
                    self.launched.discard(self.node_of[ref])  # the same node may take its probe once placeable
                    unplaced.append(info)
                    continue
                problem = compare_gpu_view(info["host"], [str(g) for g in info.get("gpus", [])], view, None)
                if problem is None and view.get("noset"):
                    problem = (
                        f"node {info['host']}: RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES is set, so Ray workers "
                        "keep every GPU visible and all use GPU 0 (SkyRL issue 1577); unset it"
                    )
                if problem:
                    raise NodeFailure("setup", problem)
                self.passed.add(info.get("ip"))
            if unplaced:
                self.relaunch(unplaced, node_files, deadline)

    def relaunch(self, infos: list[dict[str, Any]], node_files: dict[int, dict[str, Any]], deadline: float) -> None:
        """The probes of the nodes in `infos` again, on the nodes alive at their addresses (after RETRY_S, so the
        scheduler's view catches up; one wait and one node list for all of them); NodeFailure naming the nodes
        none is there for before `deadline`."""
        while self.clock() < deadline:
            self.sleep(RETRY_S)
            addresses = {info.get("ip") for info in infos}
            alive = [n for n in self.ray.nodes() if n.get("Alive") and n.get("NodeManagerAddress") in addresses]
            self.launch_ready(alive, node_files)
            done = self.passed | {other.get("ip") for other in self.pending.values()}
            infos = [info for info in infos if info.get("ip") not in done]
            if not infos:
                return
        if len(infos) == 1:
            raise NodeFailure(
                "infra", f"node {infos[0]['host']}: its Ray left the cluster during the GPU visibility check"
            )
        names = ", ".join(info["host"] for info in infos)
        raise NodeFailure("infra", f"nodes {names}: their Ray left the cluster during the GPU visibility check")
