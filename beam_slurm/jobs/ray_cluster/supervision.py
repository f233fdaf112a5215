"""Liveness while the driver runs: the head watches every worker's raylet port, each worker the head's GCS port, so
a node that vanishes ends the step in seconds, not after Slurm's node timeout (the clock is injected for tests)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable

from beam_slurm.jobs.ray_cluster.network import tcp_reachable
from beam_slurm.jobs.ray_cluster.rendezvous import Rendezvous


class WorkerWatch:
    """The head's view of the workers while the driver runs: each worker's raylet port must stay reachable."""

    def __init__(
        self,
        rendezvous: Rendezvous,
        lost_after_s: float,
        probe_every_s: float = 2.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        reachable: Callable[[str, int], bool] = tcp_reachable,
    ):
        self.rendezvous = rendezvous
        self.lost_after_s = lost_after_s
        self.probe_every_s = probe_every_s
        self.clock = clock
        self.reachable = reachable
        self.last_seen: dict[int, float] = {}
        self.next_probe = float("-inf")

    def lost_node(self) -> str:
        """'' while every worker answers; else a sentence naming the node that stopped answering."""
        now = self.clock()
        if now < self.next_probe:
            return ""
        self.next_probe = now + self.probe_every_s
        for rank, info in sorted(self.rendezvous.nodes().items()):
            port = info.get("node_manager_port")
            if rank == 0 or not port:
                continue
            if self.reachable(info["ip"], int(port)):
                self.last_seen[rank] = now
            elif now - self.last_seen.setdefault(rank, now) > self.lost_after_s:
                return (
                    f"node {info.get('host')} ({info['ip']}): its Ray has not answered for "
                    f"{self.lost_after_s:.0f}s (node down or unreachable)"
                )
        return ""


class HeadWatch:
    """A worker's view of the head: its GCS port must stay reachable."""

    def __init__(
        self,
        head_ip: str,
        gcs_port: int,
        lost_after_s: float,
        probe_every_s: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        reachable: Callable[[str, int], bool] = tcp_reachable,
    ):
        self.head_ip = head_ip
        self.gcs_port = gcs_port
        self.lost_after_s = lost_after_s
        self.probe_every_s = probe_every_s
        self.clock = clock
        self.reachable = reachable
        self.last_seen = clock()
        self.next_probe = float("-inf")

    def lost(self) -> bool:
        """True once the head's GCS has not answered for longer than lost_after_s."""
        now = self.clock()
        if now < self.next_probe:
            return False
        self.next_probe = now + self.probe_every_s
        if self.reachable(self.head_ip, self.gcs_port):
            self.last_seen = now
            return False
        return now - self.last_seen > self.lost_after_s


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> int:
    """SIGTERM the process group led by `proc`, SIGKILL after `grace_s`; its return code."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            return proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()
