"""Every rank but 0 of the Ray cluster: join the head, stay until the driver ended for good (exit 0), this node's Ray
dies or the head becomes unreachable (exit 75: this node's step ends, the batch shell restarts around it). On a warm
restart request (`head`'s module docstring) a kept node checks that the stopped driver's worker processes are gone
from it (`leftovers.check_freed`) and says so in the rendezvous folder."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from beam_slurm.core.atomic_files import read_json, write_json
from beam_slurm.core.layout import IN_JOB_ATTEMPT_ENV
from beam_slurm.core.ray_records import EXIT_INFRA, NodeFailure
from beam_slurm.jobs.ray_cluster.checks import check_gpu_count
from beam_slurm.jobs.ray_cluster.leftovers import check_freed
from beam_slurm.jobs.ray_cluster.network import node_ipv4, tcp_reachable
from beam_slurm.jobs.ray_cluster.role import NodeRole
from beam_slurm.jobs.ray_cluster.supervision import HeadWatch

logger = logging.getLogger(__name__)


class Worker(NodeRole):
    """Join the head's cluster, then supervise this node's Ray."""

    followed_head: dict[str, Any] | None = None  # the head's record once followed to another port block

    def run(self) -> int:
        check_gpu_count(self.ctx.host, self.gpus, self.gpu_source, self.ctx.spec.gpus_per_node)
        ip = None
        with contextlib.suppress(OSError):  # resolve through the route to the head once its address is known
            ip = node_ipv4(self.settings.network_interface)
            self.rendezvous.publish_node(self.ctx.rank, {"host": self.ctx.host, "ip": ip, "gpus": self.gpus})
        head = self.wait_for_head()
        if head is None:
            return 0 if self.stop_requested else EXIT_INFRA
        head_ip, gcs_port = head["address"].rsplit(":", 1)
        if not self.wait_for_turn_to_start():
            return 0  # stopped while waiting
        if ip is None:
            ip = node_ipv4(self.settings.network_interface, head_ip=head_ip)
            self.rendezvous.publish_node(self.ctx.rank, {"host": self.ctx.host, "ip": ip, "gpus": self.gpus})
        try:
            ports = self.start_ray(
                head=False,
                ip=ip,
                start_block=int(head["block"]) if int(head["block"]) >= 0 else None,
                head_address=head["address"],
                follow_head=self.head_moved,
            )
        except NodeFailure:
            # The head may have restarted on another port block after publishing: follow it once.
            again = read_json(self.rendezvous.head_file)
            if again is None or again["address"] == head["address"]:
                raise
            head = self.followed_head = again
            ports = self.start_ray(head=False, ip=ip, start_block=int(head["block"]), head_address=head["address"])
        head = self.followed_head or head  # where this node joined: the head may have moved during its start
        head_ip, gcs_port = head["address"].rsplit(":", 1)
        # The head watches this port: a node that vanishes ends the step in seconds.
        self.rendezvous.publish_node(
            self.ctx.rank,
            {
                "host": self.ctx.host,
                "ip": ip,
                "gpus": self.gpus,
                "node_manager_port": ports.node_manager,
                "ray_temp_dir": str(self.ray.temp_dir),  # tells this raylet from an earlier one at the same address
                "node_start": self.started,
                "ray_start": self.ray_start_window,
            },
        )
        self.record_bringup()
        self.rendezvous.mark_joined(self.ctx.rank)
        logger.info(f"joined {head['address']}")
        return self.supervise(HeadWatch(head_ip, int(gcs_port), self.settings.head_lost_after_s, clock=self.clock))

    def head_moved(self, address: str) -> tuple[str, int] | None:
        """After this node's failed `ray start`: the head's new (address, block) once republished and answering; None
        when it still answers at `address` (the failure was ours: next port block) or at the readiness deadline."""
        deadline = self.started_clock + self.settings.readiness_timeout_s
        while not self.stop_requested and self.clock() < deadline:
            head = read_json(self.rendezvous.head_file)
            if head is not None:
                head_ip, port = head["address"].rsplit(":", 1)
                if tcp_reachable(head_ip, int(port), timeout_s=0.5):
                    if head["address"] == address:
                        return None
                    logger.info(
                        f"the head restarted its Ray at {head['address']} (port block {head['block']}): "
                        "joining it there"
                    )
                    self.followed_head = head
                    return head["address"], int(head["block"])
            self.sleep(min(0.5, self.settings.poll_interval_s))
        return None

    def wait_for_turn_to_start(self) -> bool:
        """With ray.node_start_concurrency=C: start once rank - C workers joined or at the deadline; False: stopped."""
        limit = self.settings.node_start_concurrency
        if limit <= 0 or self.ctx.rank <= limit:
            return True
        deadline = self.started_clock + self.settings.readiness_timeout_s
        waited = False
        while (
            not self.stop_requested
            and self.rendezvous.joined_count() < self.ctx.rank - limit
            and self.clock() <= deadline
        ):
            waited = True
            self.sleep(min(0.5, self.settings.poll_interval_s))
        if waited:
            logger.info(f"my turn to join (ray.node_start_concurrency={limit})")
        return not self.stop_requested

    def wait_for_head(self) -> dict[str, Any] | None:
        deadline = self.started_clock + self.settings.readiness_timeout_s
        while not self.stop_requested:
            head = read_json(self.rendezvous.head_file)
            if head is not None:
                return head
            if self.clock() > deadline:
                self.record_failure(
                    "infra",
                    f"node {self.ctx.host}: the head ({self.ctx.host_of_rank(0)}) did not "
                    f"publish its address within {self.settings.readiness_timeout_s:.0f}s",
                )
                return None
            self.sleep(min(0.2, self.settings.poll_interval_s))
        return None

    def supervise(self, head: HeadWatch) -> int:
        """Until the driver ended (0), this node's Ray died or the head is lost (EXIT_INFRA), or a stop (0)."""
        in_job = int(os.environ.get(IN_JOB_ATTEMPT_ENV) or 0)
        while not self.stop_requested:
            if self.rendezvous.ended_file.exists():
                return 0
            request = self.rendezvous.latest_restart(in_job)
            if request is not None:
                in_job = int(request["in_job"])
                self.check_freed_for(request)
            if not self.ray.alive():
                if self.sigterm_held_at is not None:
                    logger.info("this node's Ray ended after the SIGTERM: it reached Ray too, so no save can follow")
                    return 0
                self.record_failure("infra", f"node {self.ctx.host}: this node's Ray (raylet) died")
                return EXIT_INFRA
            if head.lost():
                if self.rendezvous.ended_file.exists() or self.sigterm_held_at is not None:
                    return 0  # the driver ended, or the head stopped on the SIGTERM this node holds
                self.record_failure(
                    "infra",
                    f"node {self.ctx.host}: the head's GCS at {head.head_ip}:{head.gcs_port} "
                    f"has been unreachable for {self.settings.head_lost_after_s:.0f}s",
                )
                return EXIT_INFRA
            self.sleep(self.settings.poll_interval_s)
        return 0

    def check_freed_for(self, request: dict[str, Any]) -> None:
        """A warm restart: this node's part of the stopped driver gone (or ended), said in its freed file; this
        node's later records go to the new attempt's folder."""
        self.ctx.attempt_dir = Path(request["attempt_dir"])
        if self.ctx.host not in request.get("keep", []):
            return  # being replaced: the batch shell stops this node's step
        freed = check_freed(self.ray, self.settings.driver_stop_grace_s, clock=self.clock, sleep=self.sleep)
        write_json(self.rendezvous.freed_file(int(request["in_job"]), self.ctx.rank), freed)
        if freed["killed"]:
            logger.info(f"warm restart: ended the stopped driver's processes left here: {'; '.join(freed['killed'])}")
        logger.info(f"warm restart: this node is {'clean' if freed['clean'] else 'NOT clean'} ({freed['seconds']} s)")
