"""Files on shared storage through which the nodes of one Ray step find each other, in
`<job dir>/rendezvous/<attempt>.<step>/` (a requeued attempt or a second Ray step never reads an old head address):

- `node-<rank>.json`: each node's host, IP and GPUs, when it starts;
- `head.json`: the head's address and port block once its GCS is up (workers wait for it);
- `ready.json`: the head's bring-up times once every node and GPU registered;
- `ended.json`: the driver's status when it finished (workers then stop their Ray and exit 0);
- `joined-<rank>`: each worker once its `ray start` returned (`ray.node_start_concurrency` counts them);
- `restart-<n>.json`: the batch shell's warm restart for in-job attempt n (`Head.restart_driver`): the new attempt's
  folder, the nodes in rank order, the nodes kept and the driver's environment;
- `freed-<n>-<rank>.json`: a kept node's check after the old driver stopped: no worker process of it is left;
- `stop-driver-<n>`: the batch shell saw in-job attempt n fail (a node's step ended): the head stops the driver at
  once, before it trains on without the node, and waits for the restart request.

A warm restart keeps the folder: the cluster it describes lives on.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from beam_slurm.core.atomic_files import read_json, write_json


class Rendezvous:
    """Paths and reads/writes of one attempt's rendezvous folder."""

    def __init__(self, job_folder: Path, attempt: int, step: str):
        self.folder = job_folder / "rendezvous" / f"{attempt}.{step}"
        self.head_file, self.ready_file, self.ended_file = (
            self.folder / f"{name}.json" for name in ("head", "ready", "ended")
        )

    def publish_node(self, rank: int, info: dict[str, Any]) -> None:
        write_json(self.folder / f"node-{rank}.json", {**info, "rank": rank, "time": time.time()})

    def mark_joined(self, rank: int) -> None:
        (self.folder / f"joined-{rank}").write_text(f"{time.time():.3f}\n")

    def joined_count(self) -> int:
        """Workers whose `ray start` returned (one directory listing)."""
        return sum(1 for _ in self.folder.glob("joined-*"))

    def restart_file(self, in_job: int) -> Path:
        return self.folder / f"restart-{in_job}.json"

    def latest_restart(self, after: int) -> dict[str, Any] | None:
        """The newest restart request for an in-job attempt above `after`; None when there is none."""
        numbers = [int(p.stem.split("-", 1)[1]) for p in self.folder.glob("restart-*.json")]
        newest = max((n for n in numbers if n > after), default=None)
        return read_json(self.restart_file(newest)) if newest is not None else None

    def stop_driver_file(self, in_job: int) -> Path:
        return self.folder / f"stop-driver-{in_job}"

    def freed_file(self, in_job: int, rank: int) -> Path:
        return self.folder / f"freed-{in_job}-{rank}.json"

    def nodes(self) -> dict[int, dict[str, Any]]:
        """Every node file present now, by rank."""
        infos = (read_json(path) for path in self.folder.glob("node-*.json"))
        return {int(info["rank"]): info for info in infos if info is not None}
