"""Find one job's Ray processes on the sandbox: its nodes share this machine's process table, each has its own /tmp,
and every Ray process carries its task's SLURM_* variables. Plain module (not conftest) so any test imports it."""

from __future__ import annotations

import os
from pathlib import Path


def raylet_pids(job_id: str, *, attempt: int | None = None, node: str | None = None, not_on: str | None = None,
                rank: int | None = None) -> list[int]:
    """Raylets of this job (of one attempt when given), on `node`, not on `not_on`, or of task `rank`."""
    temp_dir = f"/tmp/ray-{job_id}-{'' if attempt is None else f'{attempt}/'}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"/raylet/raylet" not in cmdline or temp_dir not in cmdline:
            continue
        if node is not None and f"SLURMD_NODENAME={node}".encode() not in environ:
            continue
        if not_on is not None and f"SLURMD_NODENAME={not_on}".encode() in environ:
            continue
        if rank is not None and f"SLURM_PROCID={rank}".encode() not in environ:
            continue
        found.append(int(entry))
    return found


def one_raylet(job_id: str, **where) -> int | None:
    """The first raylet `raylet_pids` finds, or None."""
    pids = raylet_pids(job_id, **where)
    return pids[0] if pids else None
