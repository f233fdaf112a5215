"""Which GPUs Slurm gave a step on this node, and whether Ray hands out exactly those. SkyRL issue 1577: when the
GPU ids Ray assigns do not reach the workers, every worker ends up on GPU 0. Ray numbers GPUs by the raylet's
CUDA_VISIBLE_DEVICES, so a task holding all of a node's GPUs must see those ids.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

# ray is imported inside probe_gpu_view, on purpose: it runs as a Ray task; the bootstrap imports Ray where it must.

# Slurm writes this when the step has no GPU devices (no --gres), see Ray PR 7014.
_NO_DEVICES = {"", "NoDevFiles"}


def _split_ids(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def allocated_gpus(environ: Mapping[str, str] | None = None) -> tuple[list[str], str]:
    """This step's GPU ids here and where from (([], '') if none): CUDA_VISIBLE_DEVICES, else SLURM_STEP/JOB_GPUS."""
    environ = os.environ if environ is None else environ
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        value = environ.get(name)
        if value is not None and value not in _NO_DEVICES:
            return _split_ids(value), name
    return [], ""


def probe_gpu_view() -> dict[str, Any]:
    """Runs inside a Ray task: the GPU ids Ray assigned and the worker's CUDA_VISIBLE_DEVICES."""
    import ray

    return {
        "host": socket.gethostname(),
        "ray_gpu_ids": [str(i) for i in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "noset": os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", ""),
    }


def compare_gpu_view(
    host: str, allocated: list[str], all_gpus_view: Mapping[str, Any], one_gpu_view: Mapping[str, Any] | None
) -> str | None:
    """None when Ray's view on `host` matches Slurm's allocation, else a message saying what differs and the fix."""
    want = sorted(allocated)
    if (got := sorted(all_gpus_view["ray_gpu_ids"])) != want:
        return (
            f"node {host}: Slurm allocated GPUs {','.join(want) or 'none'} "
            f"but Ray hands out {','.join(got) or 'none'}; "
            "the raylet must inherit the step's CUDA_VISIBLE_DEVICES (do not override it in ray.extra_env or the "
            "container)"
        )
    worker_view = sorted(_split_ids(all_gpus_view.get("cuda_visible_devices") or ""))
    if worker_view != want:
        return (
            f"node {host}: a Ray worker holding all GPUs sees CUDA_VISIBLE_DEVICES="
            f"{all_gpus_view.get('cuda_visible_devices')!r}, Slurm allocated {','.join(want)}"
        )
    if one_gpu_view is not None:
        seen = _split_ids(one_gpu_view.get("cuda_visible_devices") or "")
        if len(seen) != 1 or seen[0] not in want:
            hint = (
                " (RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES is set: unset it)" if one_gpu_view.get("noset") else ""
            )
            return (
                f"node {host}: a Ray worker given 1 GPU sees CUDA_VISIBLE_DEVICES="
                f"{one_gpu_view.get('cuda_visible_devices')!r}; every worker would use GPU 0 (SkyRL issue 1577){hint}"
            )
    return None
