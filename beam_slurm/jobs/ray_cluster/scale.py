"""Settings for large clusters that the bootstrap applies on every node before `ray start`: the open-file limit
(always) and, from `ray.large_cluster_nodes` nodes on, Ray system settings for the GCS and for worker start-up (why:
each field of `RaySettings`)."""

from __future__ import annotations

import resource

from beam_slurm.config.ray import RaySettings


def large_cluster_env(settings: RaySettings, nodes: int, cpus: int = 0) -> dict[str, str]:
    """RAY_* variables for `nodes` nodes ({} below ray.large_cluster_nodes); GCS threads at least Ray's cpus // 4."""
    if not settings.large_cluster_nodes or nodes < settings.large_cluster_nodes:
        return {}
    return {
        "RAY_gcs_server_rpc_server_thread_num": str(max(settings.gcs_server_threads, cpus // 4)),
        "RAY_gcs_rpc_server_reconnect_timeout_s": str(settings.gcs_reconnect_timeout_s),
        "RAY_health_check_failure_threshold": str(settings.health_check_failure_threshold),
        "RAY_worker_register_timeout_seconds": str(settings.worker_register_timeout_s),
        "RAY_maximum_startup_concurrency": str(settings.worker_start_concurrency),
    }


def apply_to(env: dict[str, str], settings: RaySettings, nodes: int, cpus: int = 0) -> dict[str, str]:
    """Add the large-cluster variables the user did not choose (ray.extra_env) to `env`; what was added."""
    added = {k: v for k, v in large_cluster_env(settings, nodes, cpus).items() if k not in settings.extra_env}
    env.update(added)
    return added


def raise_open_files_limit(wanted: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to `wanted` (up to the hard limit, never lower); (soft before, soft after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if wanted <= 0 or soft == resource.RLIM_INFINITY or (wanted <= soft):
        return soft, soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft, max(target, soft)
