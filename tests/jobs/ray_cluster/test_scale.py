"""Large-cluster settings the bootstrap applies: the open-file limit (inherited by `ray start` and its children) and,
from ray.large_cluster_nodes on, Ray's GCS and worker start-up settings; the user's ray.extra_env wins."""

from __future__ import annotations

import subprocess
import sys

from beam_slurm.config.load import load_config
from beam_slurm.config.ray import RaySettings
from beam_slurm.config.validation import problems
from beam_slurm.jobs.ray_cluster import scale

KEYS = {"RAY_gcs_server_rpc_server_thread_num", "RAY_gcs_rpc_server_reconnect_timeout_s",
        "RAY_health_check_failure_threshold", "RAY_worker_register_timeout_seconds", "RAY_maximum_startup_concurrency"}


def test_small_jobs_keep_rays_defaults_and_large_ones_get_the_settings():
    settings = RaySettings()
    assert scale.large_cluster_env(settings, nodes=16, cpus=8) == {}
    env = scale.large_cluster_env(settings, nodes=32, cpus=8)
    assert set(env) == KEYS
    assert env["RAY_gcs_server_rpc_server_thread_num"] == "8"       # never below ours
    assert scale.large_cluster_env(settings, 1000, cpus=224)["RAY_gcs_server_rpc_server_thread_num"] == "56"  # nor Ray's
    assert env["RAY_gcs_rpc_server_reconnect_timeout_s"] == "300" and env["RAY_worker_register_timeout_seconds"] == "300"
    assert scale.large_cluster_env(RaySettings(large_cluster_nodes=0), 1000) == {}
    assert set(scale.large_cluster_env(RaySettings(large_cluster_nodes=2), 2)) == KEYS


def test_the_users_extra_env_wins():
    settings = RaySettings(large_cluster_nodes=2, extra_env={"RAY_worker_register_timeout_seconds": "900"})
    env = {"RAY_worker_register_timeout_seconds": "900"}
    added = scale.apply_to(env, settings, nodes=4)
    assert "RAY_worker_register_timeout_seconds" not in added and env["RAY_worker_register_timeout_seconds"] == "900"
    assert env["RAY_maximum_startup_concurrency"] == "16"


def test_settings_are_recipe_keys_and_validated(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = load_config(["recipe=lora_16gpu", "ray.large_cluster_nodes=8", "ray.worker_start_concurrency=4"], validate=False)
    assert (cfg.ray.large_cluster_nodes, cfg.ray.worker_start_concurrency, cfg.ray.open_files_limit) == (8, 4, 65536)
    bad = load_config(["recipe=lora_16gpu", "ray.gcs_server_threads=0", "ray.open_files_limit=-1"], validate=False)
    found = [str(p) for p in problems(bad)]
    assert any(p.startswith("ray.gcs_server_threads=0") for p in found), found
    assert any(p.startswith("ray.open_files_limit=-1") for p in found), found


def test_open_file_limit_is_raised_for_the_process_and_its_children():
    code = (
        "import resource, subprocess\n"
        "from beam_slurm.jobs.ray_cluster.scale import raise_open_files_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "print(raise_open_files_limit(4096))\n"
        "print(subprocess.run(['sh', '-c', 'ulimit -n'], capture_output=True, text=True).stdout.strip())\n"
        "print(raise_open_files_limit(1024))\n"  # never lowered
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:3] == ["(256, 4096)", "4096", "(4096, 4096)"], out
