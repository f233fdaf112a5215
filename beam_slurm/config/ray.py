"""Settings of the Ray cluster that one Slurm job starts across its allocation (in the attempt's job spec; no secret:
the auth token lives in a file)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from beam_slurm.config.ports import PORT_NAMES
from beam_slurm.core.errors import ConfigError, ConfigProblem

# Ray's unix socket paths live under <temp dir>/session_<date>_<pid>/sockets/; Linux caps them at 107 bytes.
_SESSION_SUFFIX_LEN = len("/session_2026-11-29_23-56-32_369213_1234567/sockets/plasma_store")
_UNIX_SOCKET_MAX = 107
# The job's folder and Ray's temp dir in it (beam_slurm.jobs.ray_cluster.local_ray), at a 10-digit job id.
_JOB_FOLDER = "/ray-9999999999-99-xxxxxx/r"


@dataclass
class RaySettings:
    """How `beam_slurm.jobs.ray_cluster.node` starts, checks and stops Ray on the nodes of one job."""

    network_interface: str = ""
    """Interface whose IPv4 address each node gives Ray (e.g. `ib0`), where nodes have several networks, so Ray and
    NCCL use the fast one. Empty: the hostname's address, else (loopback) the source of the route to the head."""
    port_range_start: int = 12000
    """First port of the range the per-job ports are carved from. Each job takes one block of `ports_per_job`
    ports chosen by `SLURM_JOB_ID` (see `beam_slurm.config.ports`), so two jobs sharing a node never meet."""
    port_range_end: int = 32000
    """End (exclusive) of that range. Keep it below the kernel's ephemeral range (usually 32768-60999): outgoing
    connections take ephemeral ports at random and would race Ray's listeners."""
    ports_per_job: int = 400
    """Size of one job's block: 16 fixed ports (GCS, client server, dashboard, node manager, object manager,
    agents, the metrics export and the head's autoscaler and dashboard metrics) and the rest for Ray's worker
    processes (one port each, so this bounds workers per node)."""
    port_overrides: dict[str, int] = field(default_factory=dict)
    """Fixed ports instead of the derived ones, by name (`ports.PORT_NAMES`: gcs, client_server, ..., max_worker),
    where a firewall opens only some ports; two jobs on one node then need different values."""
    readiness_timeout_s: float = 300.0
    """Deadline for every node and GPU to register with the head, from the head's start; the failure names the nodes
    that did not join."""
    poll_interval_s: float = 0.5
    """How often the head asks the GCS for registered nodes during bring-up, and how often each node checks that
    its own Ray processes are alive afterwards."""
    head_lost_after_s: float = 15.0
    """A worker whose head's GCS port stays unreachable this long (without the head saying it ended) stops its
    Ray and fails, so a lost head ends the step instead of leaving workers waiting."""
    dashboard_host: str = "127.0.0.1"
    """Address the dashboard binds to on the head. Loopback by default: the dashboard and job API run arbitrary
    code for whoever reaches them; reach it with an SSH tunnel. `0.0.0.0` exposes it to the cluster network."""
    include_dashboard: bool = True
    """Start the dashboard on the head (needed for `ray job` and the state API, not for training)."""
    auth: bool = True
    """Token authentication (Ray >= 2.52, `RAY_AUTH_MODE=token`): a random per-job token in a file readable only by
    the user, required by every node and client. Turn off only for a Ray older than 2.52."""
    state_dir: str = ""
    """Per-user directory on shared storage (same path on every node) with one private folder per job: the auth
    token and the rendezvous files. Empty: `$BEAM_SLURM_STATE_DIR`, else `~/.beam-slurm`."""
    temp_dir_root: str = "/tmp"
    """Node-local directory under which each job's folder (`ray-<jobid>-<attempt>-<random>`, mode 0700, Ray's temp
    dir inside it) is created. Must be short (16 characters at most): Ray's unix sockets live below it and Linux
    limits their paths to 107 bytes."""
    object_store_memory_bytes: int = 0
    """Object store size per node in bytes. 0: Ray's default (30% of the node's memory, capped by /dev/shm)."""
    num_cpus: int = 0
    """CPUs each node offers to Ray. 0: the CPUs Slurm gave this job on the node (`SLURM_CPUS_ON_NODE`)."""
    check_gpus: bool = True
    """After bring-up, run one task per node that reports the GPU ids Ray hands out and the CUDA_VISIBLE_DEVICES a
    Ray worker sees, and fail unless they are exactly the GPUs Slurm allocated to the step (SkyRL issue 1577)."""
    driver_stop_grace_s: float = 10.0
    """When the step is stopped, time the driver gets after SIGTERM before it is killed."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """Environment for the Ray processes on every node and for the driver (e.g. NCCL_SOCKET_IFNAME,
    RAY_worker_register_timeout_seconds). Passed through the environment, never on a command line."""
    open_files_limit: int = 65536
    """Soft RLIMIT_NOFILE set before `ray start` on every node, capped by the hard limit: the GCS keeps a connection
    per raylet, worker and driver, so 1024 runs out at a few hundred nodes. 0 keeps the inherited limit."""
    node_start_concurrency: int = 0
    """At most this many worker nodes run `ray start` at once, the others waiting for lower ranks (0: all at once). A
    worker's `ray start` gives up when its raylet is not in the GCS within Ray's fixed 30 s: where the GCS answers
    slowly, staggering is what lets them join (on the 2-core sandbox, 16 at once timed out, 4 at a time joined)."""
    large_cluster_nodes: int = 32
    """From this many nodes in the job on, the bootstrap also sets the large-cluster settings below (Ray system
    settings as RAY_* variables; a variable set in ray.extra_env wins). Below it Ray's defaults apply. 0: never."""
    gcs_server_threads: int = 8
    """Large clusters: at least this many GCS RPC threads (RAY_gcs_server_rpc_server_thread_num; Ray's default, a
    quarter of the head's cores, is 1-2 in a small step) for the registrations arriving at once at bring-up."""
    gcs_reconnect_timeout_s: int = 300
    """Large clusters: how long a raylet or worker retries an unresponsive GCS (RAY_gcs_rpc_server_reconnect_timeout_s,
    Ray's 60 s): a GCS registering hundreds of nodes may not answer sooner; a raylet giving up loses its node."""
    health_check_failure_threshold: int = 10
    """Large clusters: missed GCS health checks before a node is dead (RAY_health_check_failure_threshold, Ray's 5
    at a 3 s period): a busy GCS or raylet misses some at bring-up; ray.head_lost_after_s still catches a real loss."""
    worker_register_timeout_s: int = 300
    """Large clusters: how long a starting Ray worker may take to register with its raylet
    (RAY_worker_register_timeout_seconds, Ray's 60 s): thousands importing from shared storage start slowly."""
    worker_start_concurrency: int = 16
    """Large clusters: at most this many Ray workers start at once per node (RAY_maximum_startup_concurrency, Ray's
    default: the node's CPUs), so the cluster does not stampede the file system's metadata servers."""

    def problems(self) -> list[ConfigProblem]:
        """Every invalid field, each with the fix."""
        found: list[ConfigProblem] = []
        if not (1024 <= self.port_range_start < self.port_range_end <= 65536):
            found.append(
                ConfigProblem(
                    "ray.port_range_start/port_range_end",
                    (self.port_range_start, self.port_range_end),
                    "use 1024 <= start < end <= 65536, e.g. 12000..32000",
                )
            )
        if self.ports_per_job < 32:
            found.append(
                ConfigProblem(
                    "ray.ports_per_job", self.ports_per_job, "use at least 32 (16 fixed ports plus worker ports)"
                )
            )
        elif self.port_range_end - self.port_range_start < self.ports_per_job:
            found.append(
                ConfigProblem(
                    "ray.ports_per_job",
                    self.ports_per_job,
                    "the port range must hold at least one block; widen it or lower ports_per_job",
                )
            )
        for name, value in self.port_overrides.items():
            if name not in PORT_NAMES:
                found.append(ConfigProblem(f"ray.port_overrides.{name}", value, f"use one of {', '.join(PORT_NAMES)}"))
            elif not isinstance(value, int) or not (1 <= value <= 65535):
                found.append(ConfigProblem(f"ray.port_overrides.{name}", value, "use a port number 1..65535"))
        if self.readiness_timeout_s <= 0:
            found.append(
                ConfigProblem("ray.readiness_timeout_s", self.readiness_timeout_s, "use a positive number of seconds")
            )
        if self.poll_interval_s <= 0 or self.poll_interval_s > 30:
            found.append(ConfigProblem("ray.poll_interval_s", self.poll_interval_s, "use a value in (0, 30] seconds"))
        if not os.path.isabs(self.temp_dir_root):
            found.append(
                ConfigProblem("ray.temp_dir_root", self.temp_dir_root, "use an absolute node-local path such as /tmp")
            )
        elif len(self.temp_dir_root) + len(_JOB_FOLDER) + _SESSION_SUFFIX_LEN > _UNIX_SOCKET_MAX:
            found.append(
                ConfigProblem(
                    "ray.temp_dir_root",
                    self.temp_dir_root,
                    "use a shorter path (Ray's unix sockets below it must fit in 107 bytes), e.g. /tmp",
                )
            )
        for names, least, fix in (
            (("object_store_memory_bytes",), 0, "use 0 (Ray's default) or a size in bytes"),
            (
                ("open_files_limit", "large_cluster_nodes", "node_start_concurrency"),
                0,
                "use 0 (off) or a positive number",
            ),
            (
                (
                    "gcs_server_threads",
                    "gcs_reconnect_timeout_s",
                    "health_check_failure_threshold",
                    "worker_register_timeout_s",
                    "worker_start_concurrency",
                ),
                1,
                "use a positive number",
            ),
            (("num_cpus",), 0, "use 0 (Slurm's CPUs on the node) or a positive count"),
        ):
            found += [
                ConfigProblem(f"ray.{name}", getattr(self, name), fix) for name in names if getattr(self, name) < least
            ]
        for key, text in self.extra_env.items():
            if not key or "=" in key or not isinstance(text, str):
                found.append(ConfigProblem(f"ray.extra_env.{key}", text, "use NAME: string value pairs"))
        return found

    def validate(self) -> RaySettings:
        """Raise ConfigError listing every problem; return self when valid."""
        if problems := self.problems():
            raise ConfigError(problems)
        return self

    def resolved_state_dir(self) -> str:
        """The state directory with `$BEAM_SLURM_STATE_DIR` and `~` applied."""
        chosen = self.state_dir or os.environ.get("BEAM_SLURM_STATE_DIR", "") or "~/.beam-slurm"
        return os.path.abspath(os.path.expanduser(chosen))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RaySettings:
        """Build from a mapping (config node or JSON); unknown keys are rejected by name."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                [
                    ConfigProblem(f"ray.{key}", values[key], f"remove it; known keys: {', '.join(sorted(known))}")
                    for key in unknown
                ]
            )
        given: dict[str, Any] = {
            key: (dict(value) if isinstance(value, Mapping) else value) for key, value in values.items()
        }
        return cls(**given)
