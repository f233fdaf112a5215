"""After a driver stopped, before the next one starts on the same Ray: are its actors' processes gone from this
node, and their GPU memory with them? Checked on each node, never assumed: Ray ends a finished driver's workers
itself, in seconds; what is left by the deadline is SIGKILLed (SIGCONT first: a frozen process), and a process
that survives that makes the node unusable for a warm restart."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from beam_slurm.jobs.ray_cluster.local_ray import LocalRay, session_members

NVIDIA_SMI_TIMEOUT_S = 10.0


def gpu_holders() -> set[int] | None:
    """PIDs holding GPU memory on this node (`nvidia-smi --query-compute-apps`); None where it cannot be asked."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {int(word) for word in out.stdout.split() if word.isdigit()} if out.returncode == 0 else None


def check_freed(
    ray: LocalRay,
    wait_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Wait up to `wait_s` for this node's Ray worker processes to end, end the rest; what was found, as the
    rendezvous's freed file holds it: {clean, killed, left, gpu_checked, seconds}."""
    began = clock()
    left = ray.worker_processes()
    while left and clock() - began < wait_s:
        sleep(0.2)
        left = ray.worker_processes()
    killed = [f"{pid} {title}" for pid, title in left]
    for sig, wait in ((signal.SIGCONT, 0.0), (signal.SIGKILL, 5.0)):
        for pid, _ in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = clock() + wait
        while left and clock() < deadline:
            sleep(0.2)
            left = ray.worker_processes()
    holders = gpu_holders()
    # Any process of this Ray's session: an actor's own child (an inference engine) may hold the memory.
    on_gpu = sorted(holders & set(session_members(ray.pgid))) if holders and ray.pgid else []
    return {
        "clean": not left and not on_gpu,
        "killed": killed,
        "left": [f"{pid} {title}" for pid, title in left] + [f"{pid} holds GPU memory" for pid in on_gpu],
        "gpu_checked": holders is not None,
        "seconds": round(clock() - began, 3),
    }
