"""One Ray node of a job: `python -m beam_slurm.ray_cluster.node -- DRIVER ARGV...`, run by ONE srun step over all
nodes with one task per node.

Rank 0 (SLURM_PROCID) is the head: it starts `ray start --head` with the job's ports and temp dir, publishes its
address on shared storage, waits (polling the GCS through Ray's Python API, no fixed sleeps) until every node and
every GPU has registered, checks that Ray hands out the GPUs Slurm allocated, runs the driver with RAY_ADDRESS set and
exits with the driver's status. Other ranks wait for the head's address, join, and stay until the head says the
driver ended, their own Ray dies (exit 75, so `srun --kill-on-bad-exit=1` ends the whole step at once), or the head
becomes unreachable. SIGTERM (the step being stopped) stops the driver and this job's Ray on the node, nothing else.

Inputs (environment): SLURM_JOB_ID, SLURM_PROCID, SLURM_STEP_ID, SLURM_STEP_NUM_NODES, SLURM_STEP_NODELIST,
SLURM_RESTART_COUNT, SLURM_CPUS_ON_NODE, the step's CUDA_VISIBLE_DEVICES; BEAM_RAY_SETTINGS (RaySettings as JSON),
BEAM_GPUS_PER_NODE (expected GPUs per node, optional), BEAM_ATTEMPT_DIR (per-attempt log folder, optional).
Outputs in BEAM_ATTEMPT_DIR: ray-<host>.log (ray start output), failure.json (first failure: kind, node, reason),
driver_exit.json (the driver's status), ray_ready.json (bring-up times).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from beam_slurm.ray_cluster import auth
from beam_slurm.ray_cluster.gpus import allocated_gpus, compare_gpu_view, probe_gpu_view
from beam_slurm.ray_cluster.local_ray import LocalRay
from beam_slurm.ray_cluster.network import node_ipv4
from beam_slurm.ray_cluster.ports import RayPorts, choose_ports
from beam_slurm.atomic_files import write_json
from beam_slurm.ray_cluster.rendezvous import Rendezvous, read_json
from beam_slurm.ray_cluster.settings import RaySettings

EXIT_INFRA = 75
"""A node's Ray died, a node never joined or the head vanished: the allocation failed, a requeue may help."""
EXIT_SETUP = 78
"""Bring-up found a configuration fault (GPU visibility, interface, task layout): a requeue will not help."""
EXIT_STOPPED = 143
"""The step was stopped (SIGTERM) before the driver finished."""
FAILURE_FILE = "failure.json"
"""First failure of the attempt, in BEAM_ATTEMPT_DIR: {kind: infra|setup, node, reason, time}."""
READY_FILE = "ray_ready.json"
"""Bring-up times, in BEAM_ATTEMPT_DIR: job_start, node_start, head_up, registered, gpus_checked (epoch seconds)."""
DRIVER_EXIT_FILE = "driver_exit.json"
"""The driver's exit status, in BEAM_ATTEMPT_DIR: {status, time}."""
_RAY_START_TRIES = 3


class NodeFailure(Exception):
    """A failure this node detected; `kind` is 'infra' or 'setup'."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


@dataclass
class NodeContext:
    """What one task of the Ray step knows about itself, from Slurm's environment."""

    job_id: str
    """SLURM_JOB_ID."""
    attempt: int
    """SLURM_RESTART_COUNT."""
    step: str
    """SLURM_STEP_ID (separates two Ray steps of one attempt)."""
    rank: int
    """SLURM_PROCID; 0 is the head."""
    num_nodes: int
    """Nodes in the step."""
    host: str
    """This node's name."""
    step_hosts: list[str]
    """Every node of the step, in rank order (one task per node, block distribution)."""
    expected_gpus: int | None
    """GPUs each node should have (BEAM_GPUS_PER_NODE), None when not given."""
    attempt_dir: Path | None
    """Per-attempt log folder on shared storage."""
    cpus: int
    """CPUs on this node for this job."""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "NodeContext":
        env = dict(os.environ if environ is None else environ)
        missing = [name for name in ("SLURM_JOB_ID", "SLURM_PROCID") if name not in env]
        if missing:
            raise NodeFailure("setup", f"{', '.join(missing)} not set: run this module with srun inside the job")
        num_nodes = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or 1)
        num_tasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or num_nodes)
        if num_tasks != num_nodes:
            raise NodeFailure("setup", f"the Ray step has {num_tasks} tasks on {num_nodes} nodes; run it with "
                                       "--ntasks-per-node=1 (one Ray node per host)")
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        hosts: list[str] = []
        if nodelist:
            from beam_slurm.slurm.scheduler import SlurmCommandError, expand_hostnames

            try:
                hosts = expand_hostnames(nodelist)
            except SlurmCommandError:
                hosts = []
        expected = env.get("BEAM_GPUS_PER_NODE", "")
        return cls(
            job_id=env["SLURM_JOB_ID"],
            attempt=int(env.get("SLURM_RESTART_COUNT") or 0),
            step=env.get("SLURM_STEP_ID", "0"),
            rank=int(env["SLURM_PROCID"]),
            num_nodes=num_nodes,
            host=env.get("SLURMD_NODENAME") or socket.gethostname(),
            step_hosts=hosts,
            expected_gpus=int(expected) if expected else None,
            attempt_dir=Path(env["BEAM_ATTEMPT_DIR"]) if env.get("BEAM_ATTEMPT_DIR") else None,
            cpus=int(env.get("SLURM_CPUS_ON_NODE") or os.cpu_count() or 1),
        )

    def host_of_rank(self, rank: int) -> str:
        return self.step_hosts[rank] if rank < len(self.step_hosts) else f"rank {rank}"


class RayNode:
    """Bring-up, supervision and teardown of this node's part of the job's Ray cluster."""

    def __init__(self, ctx: NodeContext, settings: RaySettings):
        self.ctx = ctx
        self.settings = settings
        self.started = time.time()
        self.stop_requested = False
        self.registered_at: float | None = None
        """When every node and GPU had registered with the GCS (before the GPU visibility check)."""
        job_folder = auth.ensure_job_dir(settings, ctx.job_id)
        self.rendezvous = Rendezvous(job_folder, ctx.attempt, ctx.step)
        self.token_path = auth.ensure_token(settings, ctx.job_id) if settings.auth else None
        temp_dir = Path(settings.temp_dir_root) / f"ray-{ctx.job_id}-{ctx.attempt}"
        log_dir = ctx.attempt_dir if ctx.attempt_dir else temp_dir
        self.ray = LocalRay(temp_dir, log_dir / f"ray-{ctx.host}.log")
        self.gpus, self.gpu_source = allocated_gpus()

    # --- small helpers -------------------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        print(f"[ray-node {self.ctx.host} rank {self.ctx.rank} +{time.time() - self.started:5.1f}s] {message}",
              file=sys.stderr, flush=True)

    def ray_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings.extra_env)
        env.update(auth.auth_env(self.settings, self.token_path))
        # Ray's usage-stats prompt and the driver must not wait for a terminal.
        env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        return env

    def record_failure(self, kind: str, reason: str) -> None:
        """Keep the first failure of the attempt for the batch shell (and print it)."""
        self.log(f"FAILED ({kind}): {reason}")
        if self.ctx.attempt_dir is None:
            return
        path = self.ctx.attempt_dir / FAILURE_FILE
        if not path.exists():
            write_json(path, {"kind": kind, "node": self.ctx.host, "rank": self.ctx.rank,
                                         "reason": reason, "time": time.time()})

    def check_gpu_count(self) -> None:
        expected = self.ctx.expected_gpus
        if expected is not None and len(self.gpus) != expected:
            source = self.gpu_source or "CUDA_VISIBLE_DEVICES/SLURM_STEP_GPUS/SLURM_JOB_GPUS (none set)"
            raise NodeFailure("setup", f"node {self.ctx.host}: Slurm gave this step {len(self.gpus)} GPUs "
                                       f"(from {source}) but the job expects {expected} per node; request them with "
                                       f"--gpus-per-node={expected} (or --gres=gpu:{expected})")

    def start_ray(self, head: bool, ip: str, start_block: int | None, head_address: str = "",
                  on_gcs_up: Callable[[RayPorts], None] | None = None) -> RayPorts:
        """`ray start` with this job's ports; on a bind race, the next free block (up to 3 tries)."""
        block = start_block
        last_error: Exception | None = None
        for _ in range(_RAY_START_TRIES):
            ports = choose_ports(self.settings, int(self.ctx.job_id), head=head, start_block=block)
            args = [f"--node-ip-address={ip}", f"--temp-dir={self.ray.temp_dir}", f"--num-gpus={len(self.gpus)}",
                    f"--num-cpus={self.settings.num_cpus or self.ctx.cpus}", "--disable-usage-stats"]
            args += ports.ray_start_args(head)
            if head:
                args += ["--head", f"--dashboard-host={self.settings.dashboard_host}",
                         f"--include-dashboard={'true' if self.settings.include_dashboard else 'false'}"]
            else:
                args.append(f"--address={head_address}")
            if self.settings.object_store_memory_bytes:
                args.append(f"--object-store-memory={self.settings.object_store_memory_bytes}")
            announced = False

            def announce_when_gcs_listens() -> None:
                nonlocal announced
                if not announced and on_gcs_up is not None and _tcp_reachable(ip, ports.gcs, timeout_s=0.05):
                    announced = True
                    on_gcs_up(ports)

            try:
                self.ray.start(args, self.ray_env(), ray_executable=_ray_executable(),
                               while_starting=announce_when_gcs_listens if head else None)
                if head and not announced and on_gcs_up is not None:
                    on_gcs_up(ports)
                return ports
            except RuntimeError as exc:
                last_error = exc
                self.log(f"ray start failed on port block {ports.block}, retrying on the next one")
                block = ports.block + 1
        raise NodeFailure("infra", f"node {self.ctx.host}: Ray did not start: {last_error}")

    # --- head ----------------------------------------------------------------------------------------------------
    def run_head(self, driver: list[str]) -> int:
        ip = node_ipv4(self.settings.network_interface)
        self.check_gpu_count()
        self.rendezvous.publish_node(0, {"host": self.ctx.host, "ip": ip, "gpus": self.gpus})

        def publish(ports: RayPorts) -> None:
            write_json(self.rendezvous.head_file, {"address": f"{ip}:{ports.gcs}", "block": ports.block,
                                                              "host": self.ctx.host, "time": time.time()})
            self.log(f"GCS listening at {ip}:{ports.gcs} (port block {ports.block}); address published")

        ports = self.start_ray(head=True, ip=ip, start_block=None, on_gcs_up=publish)
        address = f"{ip}:{ports.gcs}"
        head_up = time.time()
        self.log(f"head up at {address} (temp dir {self.ray.temp_dir})")
        registered = self.wait_for_cluster(address)
        self.log(f"all {self.ctx.num_nodes} nodes and {registered} GPUs registered")
        timing = {"job_start": _job_start_time(), "node_start": self.started, "head_up": head_up,
                  "registered": self.registered_at, "gpus_checked": time.time(), "nodes": self.ctx.num_nodes,
                  "gpus": registered}
        write_json(self.rendezvous.ready_file, timing)
        if self.ctx.attempt_dir is not None:
            write_json(self.ctx.attempt_dir / READY_FILE, timing)
        if self.stop_requested:
            return EXIT_STOPPED
        return self.run_driver(driver, address)

    def wait_for_cluster(self, address: str) -> int:
        """Poll the GCS until every node and GPU registered, then check GPU visibility; returns the GPU count."""
        # Ray reads the auth settings when it is first imported, so they must be in the environment before.
        os.environ.update(auth.auth_env(self.settings, self.token_path))
        import ray

        deadline = self.started + self.settings.readiness_timeout_s
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, configure_logging=False,
                     include_dashboard=False)
        except ConnectionError as exc:
            raise NodeFailure("infra", f"node {self.ctx.host}: cannot reach the head's GCS at {address}: {exc}") from exc
        try:
            while True:
                if self.stop_requested:
                    return 0
                nodes = [n for n in ray.nodes() if n.get("Alive")]
                node_files = self.rendezvous.nodes()
                expected_gpus = sum(len(info.get("gpus", [])) for info in node_files.values())
                if len(node_files) < self.ctx.num_nodes and self.ctx.expected_gpus is not None:
                    expected_gpus = self.ctx.expected_gpus * self.ctx.num_nodes
                gpus = int(sum(n.get("Resources", {}).get("GPU", 0) for n in nodes))
                if len(nodes) >= self.ctx.num_nodes and len(node_files) == self.ctx.num_nodes and gpus >= expected_gpus:
                    self.registered_at = time.time()
                    break
                if not self.ray.alive(("/raylet/raylet", "gcs_server")):
                    raise NodeFailure("infra", f"node {self.ctx.host}: the head's Ray died during bring-up "
                                               f"(see {self.ray.log_path} and {self.ray.temp_dir})")
                if time.time() > deadline:
                    raise NodeFailure("infra", self.missing_nodes_message(nodes, node_files))
                time.sleep(self.settings.poll_interval_s)
            if self.settings.check_gpus:
                self.check_gpu_visibility(ray, nodes, node_files)
            return gpus
        finally:
            ray.shutdown()
            # ray.init installs its own SIGTERM handler in this process; a stop must run our cleanup instead.
            self.install_signal_handlers()

    def missing_nodes_message(self, alive: list[dict[str, Any]], node_files: dict[int, dict[str, Any]]) -> str:
        alive_ips = {n.get("NodeManagerAddress") for n in alive}
        problems = []
        for rank in range(self.ctx.num_nodes):
            info = node_files.get(rank)
            host = self.ctx.host_of_rank(rank)
            if info is None:
                problems.append(f"{host}: its task never started (no registration file)")
            elif info.get("ip") not in alive_ips:
                problems.append(f"{info.get('host', host)} ({info.get('ip')}): started but its Ray did not register "
                                f"with the head (see ray-{info.get('host', host)}.log)")
        if not problems:
            problems.append("every node joined but fewer GPUs than allocated registered")
        return (f"Ray cluster not complete after ray.readiness_timeout_s={self.settings.readiness_timeout_s:.0f}s: "
                + "; ".join(problems))

    def check_gpu_visibility(self, ray: Any, nodes: list[dict[str, Any]], node_files: dict[int, dict[str, Any]]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = ray.remote(probe_gpu_view)
        by_ip = {info.get("ip"): info for info in node_files.values()}
        pending = {}
        for node in nodes:
            info = by_ip.get(node.get("NodeManagerAddress"))
            count = int(node.get("Resources", {}).get("GPU", 0))
            if info is None or count == 0:
                continue
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            ref = probe.options(num_gpus=count, num_cpus=0, scheduling_strategy=strategy).remote()
            pending[ref] = info
        ready, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=120)
        if not_ready:
            names = ", ".join(pending[ref]["host"] for ref in not_ready)
            raise NodeFailure("infra", f"the GPU visibility probe did not run on {names} within 120 s")
        for ref in ready:
            info = pending[ref]
            view = ray.get(ref)
            problem = compare_gpu_view(info["host"], [str(g) for g in info.get("gpus", [])], view, None)
            if problem is None and view.get("noset"):
                problem = (f"node {info['host']}: RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES is set, so Ray workers "
                           "keep every GPU visible and all use GPU 0 (SkyRL issue 1577); unset it")
            if problem:
                raise NodeFailure("setup", problem)

    def run_driver(self, driver: list[str], address: str) -> int:
        env = self.ray_env()
        env["RAY_ADDRESS"] = address
        self.log(f"starting the driver: {driver[0]} ... ({len(driver) - 1} arguments)")
        proc = subprocess.Popen(driver, env=env, start_new_session=True)
        watch = WorkerWatch(self.rendezvous, self.settings.head_lost_after_s)
        status: int | None = None
        try:
            while status is None:
                status = proc.poll()
                if status is not None:
                    break
                if self.stop_requested:
                    self.log("stop requested: stopping the driver")
                    status = _stop_process_group(proc, self.settings.driver_stop_grace_s)
                    status = EXIT_STOPPED if status in (0, 15, -signal.SIGTERM, EXIT_STOPPED) else _shell_status(status)
                    break
                lost = "" if self.ray.alive(("/raylet/raylet", "gcs_server")) else \
                    f"node {self.ctx.host}: the head's Ray died while the driver ran"
                lost = lost or watch.lost_node()
                if lost:
                    self.record_failure("infra", lost)
                    _stop_process_group(proc, 5.0)
                    status = EXIT_INFRA
                    break
                time.sleep(self.settings.poll_interval_s)
        finally:
            if proc.poll() is None:
                _stop_process_group(proc, 5.0)
        status = _shell_status(status)
        self.log(f"driver exited with status {status}")
        if self.ctx.attempt_dir is not None:
            write_json(self.ctx.attempt_dir / DRIVER_EXIT_FILE, {"status": status, "time": time.time()})
        write_json(self.rendezvous.ended_file, {"status": status, "time": time.time()})
        return status

    # --- worker --------------------------------------------------------------------------------------------------
    def run_worker(self) -> int:
        self.check_gpu_count()
        ip = None
        try:
            ip = node_ipv4(self.settings.network_interface)
            self.rendezvous.publish_node(self.ctx.rank, {"host": self.ctx.host, "ip": ip, "gpus": self.gpus})
        except OSError:
            pass  # resolve through the route to the head once its address is known
        head = self.wait_for_head()
        if head is None:
            return 0 if self.stop_requested else EXIT_INFRA
        head_ip, gcs_port = head["address"].rsplit(":", 1)
        if ip is None:
            ip = node_ipv4(self.settings.network_interface, head_ip=head_ip)
            self.rendezvous.publish_node(self.ctx.rank, {"host": self.ctx.host, "ip": ip, "gpus": self.gpus})
        try:
            ports = self.start_ray(head=False, ip=ip, start_block=int(head["block"]) if int(head["block"]) >= 0 else None,
                                   head_address=head["address"])
        except NodeFailure:
            # The head may have restarted on another port block after publishing: follow it once.
            again = read_json(self.rendezvous.head_file)
            if again is None or again["address"] == head["address"]:
                raise
            head = again
            head_ip, gcs_port = head["address"].rsplit(":", 1)
            ports = self.start_ray(head=False, ip=ip, start_block=int(head["block"]), head_address=head["address"])
        # The head watches this port: a node that vanishes (power, kernel, network) ends the step in seconds
        # instead of after Slurm's node timeout.
        self.rendezvous.publish_node(self.ctx.rank, {"host": self.ctx.host, "ip": ip, "gpus": self.gpus,
                                                     "node_manager_port": ports.node_manager})
        self.log(f"joined {head['address']}")
        return self.supervise_worker(head_ip, int(gcs_port))

    def wait_for_head(self) -> dict[str, Any] | None:
        deadline = self.started + self.settings.readiness_timeout_s
        while not self.stop_requested:
            head = read_json(self.rendezvous.head_file)
            if head is not None:
                return head
            if time.time() > deadline:
                self.record_failure("infra", f"node {self.ctx.host}: the head ({self.ctx.host_of_rank(0)}) did not "
                                             f"publish its address within {self.settings.readiness_timeout_s:.0f}s")
                return None
            time.sleep(min(0.2, self.settings.poll_interval_s))
        return None

    def supervise_worker(self, head_ip: str, gcs_port: int) -> int:
        last_seen = time.monotonic()
        next_probe = 0.0
        while not self.stop_requested:
            if self.rendezvous.ended_file.exists():
                return 0
            if not self.ray.alive():
                self.record_failure("infra", f"node {self.ctx.host}: this node's Ray (raylet) died")
                return EXIT_INFRA
            now = time.monotonic()
            if now >= next_probe:
                next_probe = now + 1.0
                if _tcp_reachable(head_ip, gcs_port):
                    last_seen = now
                elif now - last_seen > self.settings.head_lost_after_s:
                    if self.rendezvous.ended_file.exists():
                        return 0
                    self.record_failure("infra", f"node {self.ctx.host}: the head's GCS at {head_ip}:{gcs_port} has "
                                                 f"been unreachable for {self.settings.head_lost_after_s:.0f}s")
                    return EXIT_INFRA
            time.sleep(self.settings.poll_interval_s)
        return 0

    # --- entry ---------------------------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def on_stop(signum: int, _frame: Any) -> None:
            self.stop_requested = True

        def on_notice(signum: int, _frame: Any) -> None:
            # The batch shell handles notices; a stray USR1/USR2 to the step must not kill Ray.
            self.log(f"ignoring signal {signal.Signals(signum).name} (the batch shell handles notices)")

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGUSR1, on_notice)
        signal.signal(signal.SIGUSR2, on_notice)

    def stop_leftovers_of_earlier_attempts(self) -> None:
        """Stop Ray left on this node by an earlier attempt of this job (killed before it could clean up)."""
        prefix = f"ray-{self.ctx.job_id}-"
        for folder in Path(self.settings.temp_dir_root).glob(prefix + "*"):
            if folder != self.ray.temp_dir and (folder / "beam-ray.pgid").exists():
                leftover = LocalRay(folder, self.ray.log_path)
                if leftover.stop(grace_s=2.0):
                    self.log(f"stopped Ray left over by an earlier attempt ({folder})")

    def run(self, driver: list[str]) -> int:
        self.install_signal_handlers()
        try:
            self.stop_leftovers_of_earlier_attempts()
            if self.ctx.rank == 0:
                return self.run_head(driver)
            return self.run_worker()
        except NodeFailure as failure:
            self.record_failure(failure.kind, str(failure))
            return EXIT_SETUP if failure.kind == "setup" else EXIT_INFRA
        except OSError as exc:
            self.record_failure("setup", f"node {self.ctx.host}: {exc}")
            return EXIT_SETUP
        finally:
            self.ray.stop()


class WorkerWatch:
    """The head's view of the workers while the driver runs: each worker's raylet port must stay reachable."""

    def __init__(self, rendezvous: Rendezvous, lost_after_s: float, probe_every_s: float = 2.0):
        self.rendezvous = rendezvous
        self.lost_after_s = lost_after_s
        self.probe_every_s = probe_every_s
        self.last_seen: dict[int, float] = {}
        self.next_probe = 0.0

    def lost_node(self) -> str:
        """'' while every worker answers; else a sentence naming the node that stopped answering."""
        now = time.monotonic()
        if now < self.next_probe:
            return ""
        self.next_probe = now + self.probe_every_s
        for rank, info in sorted(self.rendezvous.nodes().items()):
            port = info.get("node_manager_port")
            if rank == 0 or not port:
                continue
            if _tcp_reachable(info["ip"], int(port)):
                self.last_seen[rank] = now
            elif now - self.last_seen.setdefault(rank, now) > self.lost_after_s:
                return (f"node {info.get('host')} ({info['ip']}): its Ray has not answered for "
                        f"{self.lost_after_s:.0f}s (node down or unreachable)")
        return ""


def _ray_executable() -> str:
    candidate = Path(sys.executable).with_name("ray")
    return str(candidate) if candidate.exists() else "ray"


def _job_start_time() -> float | None:
    value = os.environ.get("BEAM_JOB_START_TIME", "")
    return float(value) if value else None


def _tcp_reachable(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _stop_process_group(proc: subprocess.Popen, grace_s: float) -> int:
    """SIGTERM the process group led by `proc`, SIGKILL after `grace_s`; its return code."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def _shell_status(status: int | None) -> int:
    if status is None:
        return EXIT_INFRA
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        argv = argv[argv.index("--") + 1:]
    try:
        ctx = NodeContext.from_env()
        settings = RaySettings.from_env().validate()
    except Exception as exc:  # printed for the user; the batch shell sees the status
        print(f"ray-node: {exc}", file=sys.stderr)
        return EXIT_SETUP
    if ctx.rank == 0 and not argv:
        print("ray-node: no driver command; usage: python -m beam_slurm.ray_cluster.node -- DRIVER ARGV...",
              file=sys.stderr)
        return 2
    return RayNode(ctx, settings).run(argv)


if __name__ == "__main__":
    sys.exit(main())
