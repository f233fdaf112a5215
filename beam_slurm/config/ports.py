"""Per-job Ray ports: one block of the configured range per job, chosen from SLURM_JOB_ID, checked by binding. Ray's
defaults collide as soon as two jobs share a node. Job J starts at block `J mod n_blocks`, a node whose block is
taken at the next free one; workers start their search at the block the head took. Every port Ray listens on is in
the block: the ones `ray start` has no flag for (the head's autoscaler and dashboard metrics, Ray's fixed 44217 and
44227) are set through Ray's environment variables (`RayPorts.ray_env`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol


class PortRange(Protocol):
    """The part of `RaySettings` that places the port blocks (a shape: settings import ports without a cycle)."""

    port_range_start: int
    port_range_end: int
    ports_per_job: int

    # Read-only here, so a dataclass whose field is a dict fits (Mapping is not a settable dict).
    @property
    def port_overrides(self) -> Mapping[str, int]: ...


# Offsets of the fixed ports inside a block; the worker ports take the rest of the block from FIXED_PORTS on.
_FIXED_OFFSETS = {
    name: offset
    for offset, name in enumerate(
        (
            "gcs",
            "client_server",
            "dashboard",
            "node_manager",
            "object_manager",
            "dashboard_agent_listen",
            "dashboard_agent_grpc",
            "runtime_env_agent",
            "metrics_export",
            "autoscaler_metrics",
            "dashboard_metrics",
        )
    )
}
FIXED_PORTS = 16  # reserved at the start of each block (11 used, the rest spare)
PORT_NAMES = tuple(_FIXED_OFFSETS) + ("min_worker", "max_worker")  # what `RaySettings.port_overrides` accepts
_NODE_PORTS = PORT_NAMES[3:9]  # every node's fixed ports; gcs, client_server and dashboard are the head's
# Head-only ports with no `ray start` flag: Ray reads them from these variables (ray.autoscaler._private.constants,
# ray.dashboard.consts) in the monitor and the dashboard it starts.
_ENV_PORTS = {"autoscaler_metrics": "AUTOSCALER_METRIC_PORT", "dashboard_metrics": "DASHBOARD_METRIC_PORT"}
PORT_ROLES = {
    "gcs": "GCS (head)",
    "client_server": "Ray client server, ray:// (head)",
    "dashboard": "dashboard and job API (head)",
    "node_manager": "raylet",
    "object_manager": "object manager",
    "dashboard_agent_listen": "dashboard agent HTTP",
    "dashboard_agent_grpc": "dashboard agent gRPC",
    "runtime_env_agent": "runtime-env agent",
    "metrics_export": "metrics export (Prometheus)",
    "autoscaler_metrics": "autoscaler metrics (head, Prometheus)",
    "dashboard_metrics": "dashboard metrics (head, Prometheus)",
    "min_worker": "first worker port",
    "max_worker": "last worker port",
}
"""What each port is, for the plan and the Ray record."""


@dataclass(frozen=True)
class RayPorts:
    """Every port one node's Ray listens on."""

    block: int  # in the range (-1 when every port was overridden)
    gcs: int  # head only, as are client_server (`ray://`) and dashboard
    client_server: int
    dashboard: int
    node_manager: int
    object_manager: int
    dashboard_agent_listen: int
    dashboard_agent_grpc: int
    runtime_env_agent: int
    metrics_export: int
    autoscaler_metrics: int  # head only, as is dashboard_metrics
    dashboard_metrics: int
    min_worker: int  # one port per Ray worker process, up to max_worker inclusive
    max_worker: int

    def all_ports(self, head: bool) -> list[int]:
        """Every port this node will listen on (the head-only ones only on the head)."""
        fixed = [getattr(self, name) for name in _NODE_PORTS]
        if head:
            fixed += [self.gcs, self.client_server, self.dashboard, self.autoscaler_metrics, self.dashboard_metrics]
        return fixed + list(range(self.min_worker, self.max_worker + 1))

    def ray_start_args(self, head: bool) -> list[str]:
        # `--<name>-port` for each: --node-manager-port, ..., --min-worker-port, --max-worker-port
        args = [
            f"--{name.replace('_', '-')}-port={getattr(self, name)}"
            for name in (*_NODE_PORTS, "min_worker", "max_worker")
        ]
        if head:
            args = [
                f"--port={self.gcs}",
                f"--ray-client-server-port={self.client_server}",
                f"--dashboard-port={self.dashboard}",
            ] + args
        return args

    def ray_env(self) -> dict[str, str]:
        """The ports Ray takes from its environment only (the head's metrics servers)."""
        return {variable: str(getattr(self, name)) for name, variable in _ENV_PORTS.items()}

    def record(self, head: bool) -> dict[str, int]:
        """Name -> port of what this node listens on (the head-only ones only on the head), for the Ray record."""
        head_only = {"gcs", "client_server", "dashboard", *_ENV_PORTS}
        return {name: getattr(self, name) for name in PORT_NAMES if head or name not in head_only}


def describe_block(settings: PortRange) -> str:
    """What each port of a job's block is, as offsets (the plan's row): job J's block starts at
    port_range_start + (J mod blocks) x ports_per_job, or at the next free block."""
    offsets = {**_FIXED_OFFSETS, "min_worker": FIXED_PORTS, "max_worker": settings.ports_per_job - 1}
    parts = [
        f"+{offsets[name]} {PORT_ROLES[name]}"
        + (f" = {settings.port_overrides[name]} (override)" if name in settings.port_overrides else "")
        for name in PORT_NAMES
    ]
    return (
        f"one block of {settings.ports_per_job} per job in {settings.port_range_start}-"
        f"{settings.port_range_end} ({block_count(settings)} blocks, the job id picks one): "
        + ", ".join(parts)
        + "; metrics servers on the node's address, the dashboard on the head's loopback unless ray.dashboard_host"
    )


def block_count(settings: PortRange) -> int:
    return (settings.port_range_end - settings.port_range_start) // settings.ports_per_job


def first_block(job_id: int, settings: PortRange) -> int:
    return int(job_id) % block_count(settings)


def ports_for_block(block: int, settings: PortRange) -> RayPorts:
    """The ports of block `block`, with `settings.port_overrides` applied on top."""
    base = settings.port_range_start + block * settings.ports_per_job
    values: dict[str, int] = {name: base + offset for name, offset in _FIXED_OFFSETS.items()}
    values["min_worker"] = base + FIXED_PORTS
    values["max_worker"] = base + settings.ports_per_job - 1
    values.update(settings.port_overrides)
    return RayPorts(block=block, **values)


def port_is_free(port: int, host: str = "") -> bool:
    """True when a TCP listener could bind `port` on `host` now (all addresses when empty)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Same option Ray's gRPC servers set: a port in TIME_WAIT is usable, one with a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def ephemeral_range() -> tuple[int, int] | None:
    """The kernel's ephemeral port range, or None where it cannot be read."""
    try:
        low, high = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def choose_ports(
    settings: PortRange,
    job_id: int,
    head: bool,
    start_block: int | None = None,
    is_free: Callable[[int], bool] = port_is_free,
) -> RayPorts:
    """The first block from `start_block` (default: the job's own) whose ports are all free here; RuntimeError when
    none is. Overridden ports are not probed: the user asked for them, a clash surfaces as Ray's bind error."""
    count = block_count(settings)
    start = first_block(job_id, settings) if start_block is None else start_block % count
    if len(settings.port_overrides) == len(PORT_NAMES):
        ports = ports_for_block(start, settings)
        return RayPorts(**{**ports.__dict__, "block": -1})
    busy_seen: list[str] = []
    for step in range(count):
        block = (start + step) % count
        ports = ports_for_block(block, settings)
        overridden = set(settings.port_overrides.values())
        busy = [p for p in ports.all_ports(head) if p not in overridden and not is_free(p)]
        if not busy:
            return ports
        busy_seen.append(f"block {block}: port {busy[0]} in use")
    raise RuntimeError(
        f"no free block of {settings.ports_per_job} ports in {settings.port_range_start}-"
        f"{settings.port_range_end} on {socket.gethostname()} ({'; '.join(busy_seen[:3])}...); widen "
        "ray.port_range_start/port_range_end"
    )
