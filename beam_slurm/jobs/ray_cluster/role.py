"""What the head and the workers share on one node: the job's context and settings, the stop flag, logging, the
failure record, and `ray start` on the job's port block."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from beam_slurm.config import env_manifest
from beam_slurm.config.ports import RayPorts, choose_ports
from beam_slurm.config.ray import RaySettings
from beam_slurm.core.atomic_files import read_json, write_json
from beam_slurm.core.ray_records import BRINGUP_DIR, NodeFailure, record_first_failure, stopping
from beam_slurm.jobs.ray_cluster import auth, scale
from beam_slurm.jobs.ray_cluster.context import NodeContext
from beam_slurm.jobs.ray_cluster.gpus import allocated_gpus
from beam_slurm.jobs.ray_cluster.local_ray import LocalRay, RayStartAbandoned, make_private_dir, not_private
from beam_slurm.jobs.ray_cluster.log_copy import LogCopier
from beam_slurm.jobs.ray_cluster.network import tcp_reachable
from beam_slurm.jobs.ray_cluster.rendezvous import Rendezvous

logger = logging.getLogger(__name__)
_RAY_START_TRIES = 3
BIND_HOOK_DIR = Path(__file__).with_name("bind_hook")


class NodeRole:
    """This node's part of the job's Ray cluster; `Head` and `Worker` add what each side does."""

    def __init__(
        self,
        ctx: NodeContext,
        settings: RaySettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.ctx = ctx
        self.settings = settings
        self.clock = clock  # monotonic, for deadlines and liveness watches
        self.sleep = sleep
        self.started = time.time()
        self.started_clock = clock()  # readiness deadlines count from here
        self.stop_requested = False  # set by the SIGTERM/SIGINT handler (`beam_slurm.jobs.ray_cluster.node`)
        self.sigterm_held_at: float | None = None  # a first SIGTERM held as a preemption's possible notice
        self.restore_signal_handlers: Callable[[], None] = lambda: None  # ray.init replaces the SIGTERM handler
        job_folder = auth.ensure_job_dir(settings, ctx.job_id)
        self.rendezvous = Rendezvous(job_folder, ctx.attempt, ctx.step)
        self.token_path = auth.ensure_token(settings, ctx.job_id) if settings.auth else None
        # A fresh 0700 folder under a random name (beam_slurm.jobs.ray_cluster.local_ray): a name another user of the
        # node
        # planted for this job id is never used, and so cannot stop the job either.
        job_tmp = make_private_dir(Path(settings.temp_dir_root), f"ray-{ctx.job_id}-{ctx.attempt_label}-")
        log_dir = ctx.attempt_dir if ctx.attempt_dir else job_tmp
        self.ray = LocalRay(job_tmp, log_dir / f"ray-{ctx.host}.log")
        self.gpus, self.gpu_source = allocated_gpus()
        self.log_copier = LogCopier(
            self.ray.temp_dir,
            ctx.attempt_dir,
            ctx.host,
            ctx.spec.log_copy_settings(),
            private=[self.token_path] if self.token_path else [],
        )
        self.ray_start_window: tuple[float, float] | None = None  # (began, returned) of `ray start`, retries included
        self.ports: RayPorts | None = None  # the block `ray start` took (in the Ray record: which port is what)
        self.manifest_env: dict[str, str] = {}  # `export_manifest`'s variables, exported to Ray and the driver

    def hold_sigterm(self) -> bool:
        """On SIGTERM: True when held as a preemption's possible notice (never the batch shell's stop, nor a second)."""
        if not self.ctx.spec.sigterm_notice or self.ctx.attempt_dir is None or self.sigterm_held_at is not None:
            return False
        if not self.can_hold_sigterm() or stopping(self.ctx.attempt_dir):
            return False
        self.sigterm_held_at = time.time()
        return True

    def can_hold_sigterm(self) -> bool:
        """Whether a save could follow a held SIGTERM in this node's phase (the head: only while the driver runs)."""
        return True

    def export_manifest(self) -> None:
        """Resolve the environment manifest on this node (secret files read here) and record it, secrets masked."""
        try:
            self.manifest_env, missing = env_manifest.resolve(self.ctx.spec.env_manifest, os.environ)
        except env_manifest.ManifestError as exc:
            raise NodeFailure("setup", f"node {self.ctx.host}: {exc}") from None
        env_manifest.record(self.ctx.attempt_dir, self.ctx.host, self.manifest_env, missing)
        if self.manifest_env:
            logger.info(f"environment for Ray and its workers: {env_manifest.summary(self.manifest_env)}")
        if missing:
            logger.warning(f"warning: the recipe's variables {', '.join(missing)} did not reach this node")

    def prefix(self) -> str:
        return f"[ray-node {self.ctx.host} rank {self.ctx.rank} +{time.time() - self.started:5.1f}s] "

    def ray_start_env(self, ip: str, ports: RayPorts) -> dict[str, str]:
        """`ray_env` for `ray start`: the metrics ports of the block, and the start-up hook that binds the metrics
        servers to this node's address (beam_slurm/jobs/ray_cluster/bind_hook) first on the path."""
        env = {**self.ray_env(), **ports.ray_env(), "BEAM_RAY_METRICS_HOST": ip}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(BIND_HOOK_DIR), env.get("PYTHONPATH", ""))))
        return env

    def ray_env(self) -> dict[str, str]:
        env = {**os.environ, **self.manifest_env}
        # Large clusters: GCS threads and timeouts, worker start-up (beam_slurm.jobs.ray_cluster.scale); ray.extra_env
        # wins.
        scale.apply_to(env, self.settings, self.ctx.num_nodes, self.ctx.cpus)
        env.update(self.settings.extra_env)
        env.update(auth.auth_env(self.settings, self.token_path))
        # Ray's usage-stats prompt and the driver must not wait for a terminal.
        env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        return env

    def record_bringup(self) -> None:
        """This node's start and `ray start` window in bringup/<host>.json (kept, unlike the rendezvous files)."""
        if self.ctx.attempt_dir is not None:
            write_json(
                self.ctx.attempt_dir / BRINGUP_DIR / f"{self.ctx.host}.json",
                {
                    "host": self.ctx.host,
                    "rank": self.ctx.rank,
                    "node_start": self.started,
                    "ray_start": self.ray_start_window,
                    "ports": self.ports.record(self.ctx.rank == 0) if self.ports else None,
                },
            )

    def record_failure(self, kind: str, reason: str) -> None:
        """Keep the first failure of the attempt for the batch shell (and print it)."""
        logger.info(f"FAILED ({kind}): {reason}")
        record_first_failure(self.ctx.attempt_dir, kind, self.ctx.host, self.ctx.rank, reason)

    def start_ray(
        self,
        head: bool,
        ip: str,
        start_block: int | None,
        head_address: str = "",
        on_gcs_up: Callable[[RayPorts], None] | None = None,
        follow_head: Callable[[str], tuple[str, int] | None] | None = None,
    ) -> RayPorts:
        """`ray start` with this job's ports; on a bind race, the next block (up to 3 tries). After a failed try a
        worker's `follow_head(address)` says where a restarted head is now ((address, block) or None)."""
        block = start_block
        last_error: Exception | None = None
        _, after = scale.raise_open_files_limit(self.settings.open_files_limit)  # inherited by every Ray process
        added = scale.large_cluster_env(self.settings, self.ctx.num_nodes, self.ctx.cpus)
        if added and head and after < self.settings.open_files_limit:
            logger.warning(
                f"warning: open-file limit {after} (the hard limit) is below ray.open_files_limit="
                f"{self.settings.open_files_limit}; at {self.ctx.num_nodes} nodes the GCS may run out of descriptors"
            )
        if added and head:
            logger.info(
                f"large-cluster settings for {self.ctx.num_nodes} nodes: "
                + " ".join(f"{k}={v}" for k, v in added.items() if k not in self.settings.extra_env)
            )
        beside = Path(sys.executable).with_name("ray")
        executable = str(beside) if beside.exists() else "ray"
        began = time.time()
        for _ in range(_RAY_START_TRIES):
            ports = choose_ports(self.settings, int(self.ctx.job_id), head=head, start_block=block)
            args = [
                f"--node-ip-address={ip}",
                f"--temp-dir={self.ray.temp_dir}",
                f"--num-gpus={len(self.gpus)}",
                f"--num-cpus={self.settings.num_cpus or self.ctx.cpus}",
                "--disable-usage-stats",
            ]
            args += ports.ray_start_args(head)
            if head:
                args += [
                    "--head",
                    f"--dashboard-host={self.settings.dashboard_host}",
                    f"--include-dashboard={'true' if self.settings.include_dashboard else 'false'}",
                ]
            else:
                args.append(f"--address={head_address}")
            if self.settings.object_store_memory_bytes:
                args.append(f"--object-store-memory={self.settings.object_store_memory_bytes}")
            announced = False

            # Called only while this try's ray.start runs, so the loop's current ports are the ones meant.
            def announce_when_gcs_listens() -> None:
                nonlocal announced
                if not announced and on_gcs_up is not None and tcp_reachable(ip, ports.gcs, timeout_s=0.05):  # noqa: B023
                    announced = True
                    on_gcs_up(ports)  # noqa: B023

            try:
                self.ray.start(
                    args,
                    self.ray_start_env(ip, ports),
                    ray_executable=executable,
                    while_starting=announce_when_gcs_listens if head else self.head_republished_elsewhere(head_address),
                )
                self.ray_start_window = (began, time.time())  # failed tries included: Ray's time too
                self.ports = ports
                if head and not announced and on_gcs_up is not None:
                    on_gcs_up(ports)
                self.log_copier.start()
                return ports
            except RuntimeError as exc:
                last_error = exc
                if not isinstance(exc, RayStartAbandoned):
                    logger.info(f"ray start failed on port block {ports.block}, retrying on the next one")
                block = ports.block + 1
                moved = follow_head(head_address) if follow_head is not None else None
                if moved is not None:
                    head_address, block = moved
        raise NodeFailure("infra", f"node {self.ctx.host}: Ray did not start: {last_error}")

    def head_republished_elsewhere(self, address: str) -> Callable[[], bool]:
        """For a worker's `ray start`: True once the head published another address, else the start waits minutes on
        the gone GCS (seen: 160 s); read at most twice a second."""
        next_read = 0.0

        def moved() -> bool:
            nonlocal next_read
            if time.monotonic() < next_read:
                return False
            next_read = time.monotonic() + 0.5
            published = read_json(self.rendezvous.head_file)
            if published is not None and published["address"] != address:
                logger.info(
                    f"the head republished its address ({published['address']}) while this node's ray start "
                    f"waited on {address}: giving that start up"
                )
                return True
            return False

        return moved

    def stop_leftovers_of_earlier_attempts(self) -> None:
        """Stop Ray left on this node by an earlier attempt of this job (killed before it could clean up) and remove
        its folder; a folder of this job's name that is not this user's private one is left alone, and said."""
        prefix = f"ray-{self.ctx.job_id}-"
        for folder in sorted(Path(self.settings.temp_dir_root).glob(prefix + "*")):
            if folder == self.ray.job_dir:
                continue
            problem = not_private(folder)
            if problem:
                logger.info(
                    f"refused {folder}: it {problem}; not made by this job, so nothing in it is read, written "
                    "or followed"
                )
                continue
            leftover = LocalRay(folder, self.ray.log_path)
            if leftover.stop(grace_s=2.0):
                logger.info(f"stopped Ray left over by an earlier attempt ({folder})")
            leftover.remove()  # its logs were copied while it ran; Ray's temp folders must not pile up on the node
