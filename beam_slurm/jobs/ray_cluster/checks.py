"""Checks of a node and of the assembled Ray cluster before the driver starts: the GPU count Slurm gave each node,
and that Ray hands every worker exactly the GPUs Slurm allocated (SkyRL issue 1577)."""

from __future__ import annotations

from typing import Any

from beam_slurm.core.ray_records import NodeFailure
from beam_slurm.jobs.ray_cluster.gpus import compare_gpu_view, probe_gpu_view

# ray is imported inside the functions, on purpose: the checks run where Ray is already imported.

PROBE_TIMEOUT_S = 120  # for the visibility probe on every node together


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
    """One probe per node with all its GPUs, launched as soon as the node registered, while the other nodes join."""

    def __init__(self, ray: Any):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray = ray
        self.strategy = NodeAffinitySchedulingStrategy
        self.probe = ray.remote(probe_gpu_view)
        self.pending: dict[Any, dict[str, Any]] = {}
        self.launched: set[str] = set()

    def launch_ready(self, nodes: list[dict[str, Any]], node_files: dict[int, dict[str, Any]]) -> None:
        """Start the probe on every alive node with GPUs and a registration file that has none yet."""
        by_ip = {info.get("ip"): info for info in node_files.values()}
        for node in nodes:
            info = by_ip.get(node.get("NodeManagerAddress"))
            count = int(node.get("Resources", {}).get("GPU", 0))
            if info is None or count == 0 or node["NodeID"] in self.launched:
                continue
            strategy = self.strategy(node_id=node["NodeID"], soft=False)
            ref = self.probe.options(num_gpus=count, num_cpus=0, scheduling_strategy=strategy).remote()
            self.pending[ref] = info
            self.launched.add(node["NodeID"])

    def finish(self, nodes: list[dict[str, Any]], node_files: dict[int, dict[str, Any]]) -> None:
        """Launch what is left, wait for every probe; NodeFailure naming the first node whose view differs."""
        self.launch_ready(nodes, node_files)
        ray, pending = self.ray, self.pending
        ready, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=PROBE_TIMEOUT_S)
        if not_ready:
            names = ", ".join(pending[ref]["host"] for ref in not_ready)
            raise NodeFailure("infra", f"the GPU visibility probe did not run on {names} within {PROBE_TIMEOUT_S} s")
        for ref in ready:
            info = pending[ref]
            view = ray.get(ref)
            problem = compare_gpu_view(info["host"], [str(g) for g in info.get("gpus", [])], view, None)
            if problem is None and view.get("noset"):
                problem = (
                    f"node {info['host']}: RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES is set, so Ray workers "
                    "keep every GPU visible and all use GPU 0 (SkyRL issue 1577); unset it"
                )
            if problem:
                raise NodeFailure("setup", problem)
