"""Rank 0 of the Ray cluster: `ray start --head` on the job's ports, publish the address, poll the GCS until every node
and GPU registered, check GPU visibility, then run the driver while watching the workers; exit with its status.

A warm restart (`restart_driver`): when the driver fails and the job spec gives `restart_wait_s`, the head keeps its
Ray up and waits for the batch shell's restart request in the rendezvous folder (which may also come while the driver
runs: a hang). It stops the driver, has every kept node check that the driver's worker processes are gone
(`leftovers.check_freed`), waits for the new nodes to join, and runs the driver again for the new attempt."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from beam_slurm.config.job_spec import JobSpec
from beam_slurm.config.ports import RayPorts
from beam_slurm.core.atomic_files import read_json, write_json
from beam_slurm.core.layout import IN_JOB_ATTEMPT_ENV
from beam_slurm.core.ray_records import (
    EXIT_INFRA,
    EXIT_STOPPED,
    HEAD_FILE,
    READY_FILE,
    TERM_RELAYED_FILE,
    NodeFailure,
    mark_stopping,
    record_driver_exit,
    shell_status,
)
from beam_slurm.jobs.ray_cluster import auth
from beam_slurm.jobs.ray_cluster.checks import GpuVisibilityCheck, check_gpu_count, registered_nodes
from beam_slurm.jobs.ray_cluster.leftovers import check_freed
from beam_slurm.jobs.ray_cluster.network import node_ipv4
from beam_slurm.jobs.ray_cluster.role import NodeRole
from beam_slurm.jobs.ray_cluster.supervision import WorkerWatch, stop_process_group
from beam_slurm.policy.requeue import preempted
from beam_slurm.slurm import scheduler

logger = logging.getLogger(__name__)
FREED_MARGIN_S = 20.0  # beyond the driver's stop grace: the kept nodes' SIGKILL of leftovers and their reports

# ray is imported inside wait_for_cluster, on purpose: once `ray start` is up, and only for the checks.


class Head(NodeRole):
    """Bring-up of the cluster, then the driver."""

    registered_at: float | None = None  # every node and GPU in the GCS, before the GPU visibility check
    checked_at: float | None = None  # the visibility check passed, before the head's Ray client disconnects
    driver_running: bool = False  # a held SIGTERM can lead to a save only then
    ready_gpus: int = 0  # GPUs registered at the last bring-up (a restart of the driver alone keeps them)

    def run(self, driver: list[str]) -> int:
        ip = node_ipv4(self.settings.network_interface)
        check_gpu_count(self.ctx.host, self.gpus, self.gpu_source, self.ctx.spec.gpus_per_node)
        self.rendezvous.publish_node(0, {"host": self.ctx.host, "ip": ip, "gpus": self.gpus})

        def publish(ports: RayPorts) -> None:
            head = {"address": f"{ip}:{ports.gcs}", "block": ports.block, "host": self.ctx.host, "time": time.time()}
            write_json(self.rendezvous.head_file, head)
            if self.ctx.attempt_dir is not None:  # for `beam-slurm attach` and `logs`
                write_json(
                    self.ctx.attempt_dir / HEAD_FILE,
                    {
                        **head,
                        "ip": ip,
                        "token_path": str(self.token_path) if self.token_path else None,
                        "temp_dir": str(self.ray.temp_dir),
                        "job_id": self.ctx.job_id,
                        "attempt": self.ctx.attempt,
                        "nodes": self.ctx.step_hosts,
                        "ports": ports.record(head=True),
                    },
                )
            logger.info(f"GCS listening at {ip}:{ports.gcs} (port block {ports.block}); address published")

        ports = self.start_ray(head=True, ip=ip, start_block=None, on_gcs_up=publish)
        self.record_bringup()
        address = f"{ip}:{ports.gcs}"
        head_up = time.time()
        logger.info(f"head up at {address} (temp dir {self.ray.temp_dir})")
        registered = self.wait_for_cluster(address)
        logger.info(f"all {self.ctx.num_nodes} nodes and {registered} GPUs registered")
        timing = {
            "job_start": self.ctx.spec.job_start_time,
            "node_start": self.started,
            "head_up": head_up,
            "registered": self.registered_at,
            "gpus_checked": self.checked_at or time.time(),
            "client_released": time.time(),
            "nodes": self.ctx.num_nodes,
            "gpus": registered,
            **self.bringup_windows(),
        }
        write_json(self.rendezvous.ready_file, timing)
        if self.ctx.attempt_dir is not None:
            write_json(self.ctx.attempt_dir / READY_FILE, timing)
        self.ready_gpus = registered
        if self.stop_requested:
            return EXIT_STOPPED
        in_job, env = int(os.environ.get(IN_JOB_ATTEMPT_ENV) or 0), dict[str, str]()
        while True:
            status, request = self.run_driver(driver, address, env)
            if request is None and status != 0 and not self.stop_requested:
                request = self.wait_for_restart(in_job)
            if request is None:
                break
            in_job, env = int(request["in_job"]), dict(request.get("env") or {})
            driver = list(request.get("driver") or driver)  # the new attempt's: it resumes
            if not self.restart_driver(request, address):
                status = EXIT_INFRA
                break
        write_json(self.rendezvous.ended_file, {"status": status, "time": time.time()})
        return status

    def wait_for_restart(self, in_job: int) -> dict[str, Any] | None:
        """After the driver failed: the batch shell's restart request, or None on a stop, the head's own Ray dying
        or after the job spec's `restart_wait_s` (0: no wait, the head ends as before warm restarts)."""
        wait_s = self.ctx.spec.restart_wait_s
        if wait_s <= 0:
            return None
        logger.info(f"the driver failed: keeping this cluster up for a warm restart (up to {wait_s:.0f} s)")
        deadline = self.clock() + wait_s
        while not self.stop_requested and self.clock() < deadline:
            request = self.rendezvous.latest_restart(in_job)
            if request is not None:
                return request
            if not self.ray.alive(("/raylet/raylet", "gcs_server")):
                self.record_failure("infra", f"node {self.ctx.host}: the head's Ray died after the driver")
                return None
            self.sleep(min(0.2, self.settings.poll_interval_s))
        logger.info("no warm restart requested: ending")
        return None

    def restart_driver(self, request: dict[str, Any], address: str) -> bool:
        """Carry out a warm restart request (the old driver already stopped): every kept node's worker processes of
        the old driver gone, the new nodes joined and checked; False (the failure recorded) when the cluster cannot
        go on, so the batch shell restarts cold."""
        began = time.time()
        self.ctx.attempt_dir = Path(request["attempt_dir"])  # the new attempt's records: failure, driver, ready
        self.ctx.spec = JobSpec.read(self.ctx.attempt_dir)
        self.ctx.step_hosts = list(request["ranks"])
        in_job, kept = int(request["in_job"]), list(request["keep"])
        logger.info(
            f"warm restart for in-job attempt {in_job}: kept {','.join(kept)}"
            + (f", new {','.join(request['start'])}" if request.get("start") else ", the driver alone")
        )
        freed = check_freed(self.ray, self.settings.driver_stop_grace_s, clock=self.clock, sleep=self.sleep)
        write_json(self.rendezvous.freed_file(in_job, 0), freed)
        unfreed = self.wait_for_freed(in_job, kept)
        if unfreed:
            self.record_failure("infra", f"warm restart: {unfreed}")
            return False
        freed_at = time.time()
        self.started_clock = self.clock()  # the readiness deadline counts from the restart
        new = list(request.get("start") or [])
        if not self.wait_for_new_nodes(new, float(request.get("time") or began)):
            return False
        if new:  # only the new nodes' GPUs are checked: the kept nodes passed, and said their GPUs are free
            new_ranks = {rank for rank, host in enumerate(self.ctx.step_hosts) if host in new}
            registered = self.wait_for_cluster(address, check_ranks=new_ranks)
        else:  # the driver alone: every node stayed and said it is clean, nothing joined to check
            self.registered_at = self.checked_at = time.time()
            registered = int(self.ready_gpus)
        timing = {
            "warm": True,
            "in_job": in_job,
            "restart_requested": float(request.get("time") or began),
            "stopping_done": freed_at,
            "registered": self.registered_at,
            "gpus_checked": self.checked_at or time.time(),
            "client_released": time.time(),
            "nodes": self.ctx.num_nodes,
            "gpus": registered,
            "kept": kept,
            "started": list(request.get("start") or []),
        }
        write_json(self.rendezvous.ready_file, timing)
        write_json(self.ctx.attempt_dir / READY_FILE, timing)
        self.ready_gpus = registered
        logger.info(f"warm restart: {self.ctx.num_nodes} nodes and {registered} GPUs registered again")
        return not self.stop_requested

    def wait_for_new_nodes(self, hosts: list[str], since: float) -> bool:
        """Until each new node's Ray joined (its node file republished since the request, with its raylet's port):
        the GCS may still count a lost node's raylet alive, so its count alone does not say the new one is in."""
        ranks = [rank for rank, host in enumerate(self.ctx.step_hosts) if host in hosts]
        deadline = self.started_clock + self.settings.readiness_timeout_s
        while not self.stop_requested:
            files = self.rendezvous.nodes()
            waiting = [
                self.ctx.host_of_rank(rank)
                for rank in ranks
                if not files.get(rank, {}).get("node_manager_port") or float(files[rank].get("time", 0)) < since
            ]
            if not waiting:
                return True
            if self.clock() > deadline:
                self.record_failure(
                    "infra",
                    f"warm restart: {','.join(waiting)} did not join the cluster within "
                    f"ray.readiness_timeout_s={self.settings.readiness_timeout_s:.0f}s",
                )
                return False
            self.sleep(0.1)
        return False

    def wait_for_freed(self, in_job: int, kept: list[str]) -> str:
        """Every kept node's freed file, clean: '' when so, else what is left or missing (at the deadline)."""
        ranks = [rank for rank, host in enumerate(self.ctx.step_hosts) if host in kept]
        deadline = self.clock() + self.settings.driver_stop_grace_s + FREED_MARGIN_S
        while True:
            found = {rank: read_json(self.rendezvous.freed_file(in_job, rank)) for rank in ranks}
            dirty = [
                f"{self.ctx.host_of_rank(rank)}: {'; '.join(info.get('left') or ['not clean'])}"
                for rank, info in found.items()
                if info is not None and not info.get("clean")
            ]
            if dirty:
                return "a stopped driver's processes survived on " + " | ".join(dirty)
            missing = [self.ctx.host_of_rank(rank) for rank, info in found.items() if info is None]
            if not missing:
                return ""
            if self.clock() > deadline or self.stop_requested:
                return f"{','.join(missing)} did not say whether the stopped driver's processes are gone"
            self.sleep(0.1)

    def bringup_windows(self) -> dict[str, Any]:
        """Where the bring-up time went, for ray_ready.json: preflight, the step's launch, each node's `ray start`."""
        nodes = {info.get("host", str(rank)): info for rank, info in self.rendezvous.nodes().items()}
        ray_start = {host: info.get("ray_start") for host, info in nodes.items() if info.get("ray_start")}
        node_start = {host: info.get("node_start") for host, info in nodes.items() if info.get("node_start")}
        ray_start[self.ctx.host], node_start[self.ctx.host] = self.ray_start_window, self.started
        spec = self.ctx.spec
        return {
            "preflight": list(spec.preflight_window) if spec.preflight_window else None,
            "ray_step_launch": spec.ray_step_launch_time,
            "node_starts": node_start,
            "ray_starts": ray_start,
        }

    def wait_for_cluster(self, address: str, check_ranks: set[int] | None = None) -> int:
        """Poll the GCS until every node and GPU registered, then check GPU visibility (on `check_ranks`' nodes, or
        all); returns the GPU count."""
        # Ray reads the auth settings when it is first imported, so they must be in the environment before.
        os.environ.update(auth.auth_env(self.settings, self.token_path))
        import ray

        deadline = self.started_clock + self.settings.readiness_timeout_s
        try:
            ray.init(
                address=address,
                logging_level=logging.ERROR,
                log_to_driver=False,
                configure_logging=False,
                include_dashboard=False,
            )
        except ConnectionError as exc:
            raise NodeFailure(
                "infra", f"node {self.ctx.host}: cannot reach the head's GCS at {address}: {exc}"
            ) from exc
        check = GpuVisibilityCheck(ray, ranks=check_ranks) if self.settings.check_gpus else None
        # 0.1 s on a small cluster, 1 s per 200 nodes up to ray.poll_interval_s: a large cluster's GCS is not asked
        # for its long node list many times a second.
        poll_s = min(self.settings.poll_interval_s, max(0.1, self.ctx.num_nodes / 200))
        try:
            while True:
                if self.stop_requested:
                    return 0
                nodes = [n for n in ray.nodes() if n.get("Alive")]
                node_files = self.rendezvous.nodes()
                expected_gpus = sum(len(info.get("gpus", [])) for info in node_files.values())
                if len(node_files) < self.ctx.num_nodes and self.ctx.spec.gpus_per_node is not None:
                    expected_gpus = self.ctx.spec.gpus_per_node * self.ctx.num_nodes
                # Each node's own raylet, not a lost one still listed at its address (a restart on the same node).
                registered = registered_nodes(nodes, node_files)
                gpus = int(sum(n.get("Resources", {}).get("GPU", 0) for n in registered.values()))
                if (
                    len(registered) >= self.ctx.num_nodes
                    and len(node_files) == self.ctx.num_nodes
                    and gpus >= expected_gpus
                ):
                    self.registered_at = time.time()
                    break
                if check is not None:
                    check.launch_ready(nodes, node_files)  # nodes already in: their probes run while others join
                if not self.ray.alive(("/raylet/raylet", "gcs_server")):
                    raise NodeFailure(
                        "infra",
                        f"node {self.ctx.host}: the head's Ray died during bring-up "
                        f"(see {self.ray.log_path} and {self.ray.temp_dir})",
                    )
                if self.clock() > deadline:
                    raise NodeFailure("infra", self.missing_nodes_message(nodes, node_files))
                self.sleep(poll_s)
            if check is not None:
                check.finish(nodes, node_files)
            self.checked_at = time.time()
            return gpus
        finally:
            ray.shutdown()
            # ray.init installs its own SIGTERM handler in this process; a stop must run our cleanup instead.
            self.restore_signal_handlers()

    def missing_nodes_message(self, alive: list[dict[str, Any]], node_files: dict[int, dict[str, Any]]) -> str:
        alive_ips = {n.get("NodeManagerAddress") for n in alive}
        problems = []
        for rank in range(self.ctx.num_nodes):
            info = node_files.get(rank)
            host = self.ctx.host_of_rank(rank)
            if info is None:
                problems.append(f"{host}: its task never started (no registration file)")
            elif info.get("ip") not in alive_ips:
                problems.append(
                    f"{info.get('host', host)} ({info.get('ip')}): started but its Ray did not register "
                    f"with the head (see ray-{info.get('host', host)}.log)"
                )
        if not problems:
            problems.append("every node joined but fewer GPUs than allocated registered")
        return (
            f"Ray cluster not complete after ray.readiness_timeout_s={self.settings.readiness_timeout_s:.0f}s: "
            + "; ".join(problems)
        )

    def can_hold_sigterm(self) -> bool:
        return self.driver_running  # before the driver runs there is nothing to save

    def obey_held_sigterm(self, why: str) -> None:
        logger.info(why)
        self.stop_requested = True

    def relay_held_sigterm(self) -> None:
        """On a held SIGTERM: relay a preemption to the batch shell as USR1 (the driver runs on), else stop."""
        try:
            preempt_time = scheduler.job_info(self.ctx.job_id).get("PreemptTime", "")
        except scheduler.SlurmCommandError as exc:
            return self.obey_held_sigterm(f"SIGTERM: Slurm did not say whether the job is preempted ({exc}); stopping")
        if not preempted(preempt_time):
            return self.obey_held_sigterm("SIGTERM: the job is not being preempted (no PreemptTime); stopping")
        if self.ctx.attempt_dir is not None:
            write_json(
                self.ctx.attempt_dir / TERM_RELAYED_FILE,
                {
                    "time": time.time(),
                    "held_at": self.sigterm_held_at,
                    "node": self.ctx.host,
                    "preempt_time": preempt_time,
                },
            )
        try:
            scheduler.signal_batch(self.ctx.job_id, "USR1")
        except scheduler.SlurmCommandError as exc:
            return self.obey_held_sigterm(
                f"SIGTERM of a preemption: could not relay it to the batch shell ({exc}); stopping"
            )
        logger.info(
            f"SIGTERM of a preemption (PreemptTime={preempt_time}) without a user signal: relayed to the batch "
            "shell as a notice; the driver runs on until the batch shell has its checkpoint"
        )

    def stop_driver(self, proc: subprocess.Popen, grace_s: float) -> int:
        """Stop the driver's process group. The attempt is marked as stopping first: the driver holds a first SIGTERM
        as a preemption's possible notice otherwise, and would train on (and save) without a lost node meanwhile."""
        if self.ctx.attempt_dir is not None and self.ctx.spec.sigterm_notice:
            mark_stopping(self.ctx.attempt_dir)
        return stop_process_group(proc, grace_s)

    def run_driver(
        self, driver: list[str], address: str, attempt_env: dict[str, str]
    ) -> tuple[int, dict[str, Any] | None]:
        """Run the driver to its end, a stop, a lost node or a warm restart request (then returned with the status,
        the driver stopped); the status as a shell reports it."""
        env = {**self.ray_env(), **attempt_env, "RAY_ADDRESS": address}
        in_job = int(env.get(IN_JOB_ATTEMPT_ENV) or 0)
        logger.info(f"starting the driver: {driver[0]} ... ({len(driver) - 1} arguments)")
        proc = subprocess.Popen(driver, env=env, start_new_session=True)
        self.driver_running = True
        watch = WorkerWatch(self.rendezvous, self.settings.head_lost_after_s, clock=self.clock)
        relayed = False
        request = None
        try:
            while (status := proc.poll()) is None:
                if self.rendezvous.stop_driver_file(in_job).exists():
                    logger.info("the batch shell saw a node fail: stopping the driver")
                    self.stop_driver(proc, self.settings.driver_stop_grace_s)
                    status = EXIT_INFRA
                    break
                request = self.rendezvous.latest_restart(in_job)
                if request is not None:  # a hang, or a node the batch shell saw fail first
                    logger.info(f"warm restart requested for in-job attempt {request['in_job']}: stopping the driver")
                    status = self.stop_driver(proc, self.settings.driver_stop_grace_s)
                    break
                if self.sigterm_held_at is not None and not relayed:
                    relayed = True
                    self.relay_held_sigterm()
                if self.stop_requested:
                    logger.info("stop requested: stopping the driver")
                    status = self.stop_driver(proc, self.settings.driver_stop_grace_s)
                    status = EXIT_STOPPED if status in (0, 15, -signal.SIGTERM, EXIT_STOPPED) else shell_status(status)
                    break
                lost = (
                    ""
                    if self.ray.alive(("/raylet/raylet", "gcs_server"))
                    else f"node {self.ctx.host}: the head's Ray died while the driver ran"
                )
                if lost and self.sigterm_held_at is not None:
                    self.obey_held_sigterm(
                        "the head's Ray ended after the SIGTERM: it reached Ray too, so no save can follow"
                    )
                    continue
                lost = lost or watch.lost_node()
                if lost:
                    self.record_failure("infra", lost)
                    self.stop_driver(proc, 5.0)
                    status = EXIT_INFRA
                    break
                self.sleep(self.settings.poll_interval_s)
        finally:
            if proc.poll() is None:
                self.stop_driver(proc, 5.0)
        self.driver_running = False
        status = shell_status(status)
        logger.info(f"driver exited with status {status}")
        record_driver_exit(self.ctx.attempt_dir, status)
        return status, request
