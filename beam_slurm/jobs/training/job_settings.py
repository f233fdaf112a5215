"""The training job's settings, built from the loaded recipe and nothing else (the schema holds every default):
`load_job_config` loads it inside the allocation, `job_settings` turns it into `TrainJobSettings`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from beam_slurm.config import env_manifest
from beam_slurm.config.container import Mount, same_path_mounts
from beam_slurm.config.job_spec import LogCopySettings
from beam_slurm.config.load import load_config, to_yaml
from beam_slurm.config.ray import RaySettings
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.skyrl_command import skyrl_launch
from beam_slurm.config.validation import validate_config
from beam_slurm.core.errors import ConfigProblem
from beam_slurm.core.layout import environ_attempt_label
from beam_slurm.jobs.ray_cluster.fabric import fabric_settings
from beam_slurm.jobs.training.preflight import PreflightSettings
from beam_slurm.jobs.training.steps import ContainerHook, container_hook
from beam_slurm.jobs.training.tracking import job_env
from beam_slurm.policy.hang_watch import HangLimits
from beam_slurm.policy.notice_budget import SaveCost, preflight_budget
from beam_slurm.policy.sizing import node_needs


@dataclass
class TrainJobSettings:
    """Everything the training job needs besides Slurm's own environment; built by `job_settings`."""

    driver: list[str]  # argv run on the Ray head once every node registered
    ckpt_path: str  # paths.ckpt_path on shared storage; the save-on-notice files live in <ckpt_path>/.beam/
    log_dir: str  # paths.log_dir: per-attempt logs in <log_dir>/<jobid>-<attempt>/
    nodes: int  # cluster.nodes: nodes of the Ray step (following the allocation)
    spare_nodes: int  # cluster.spare_nodes: the allocation holds nodes + spare_nodes
    max_in_job_attempts: int  # cluster.max_in_job_attempts: new Ray steps in one allocation before a requeue
    gpus_per_node: int  # 0 for CPU-only runs
    max_requeues: int  # counted against SLURM_RESTART_COUNT
    hang: HangLimits  # cluster.hang_timeout_s and the phase allowances (off for a driver of its own)
    signal_before_s: float  # an attempt starting with less time left takes it as a notice
    grace_s: float  # after a notice, the wait for the trainer's checkpoint
    stop_grace_s: float  # SIGTERM to srun's end: cluster.stop_grace_s + log_copy_s
    preflight: bool  # Run the preflight step on every node before Ray starts (`--no-preflight` turns it off)
    preflight_checks: PreflightSettings  # the attempt fills in the GPUs and the canary
    container: ContainerHook | Callable[[str], ContainerHook]  # or job_id -> hook
    ray: RaySettings  # The recipe's `ray` section, passed to every node in the attempt's job spec
    python: str  # Interpreter that runs beam_slurm on the nodes (inside a container, the container's: trainer.python)
    max_attempts_without_progress: int  # cluster.max_attempts_without_progress (0 = no guard)
    save_cost: SaveCost  # What a save on notice costs: whether a preemption's SIGTERM to the tasks leaves time for one
    qos: str  # cluster.qos (preemption by QOS reads that QOS's GraceTime)
    run_info: dict | None  # the run's record fields and config_yaml; None: no run record
    env_manifest: dict | None  # what every node exports before Ray; None for a driver of its own
    log_copy: LogCopySettings | None  # None for a driver of its own

    def problems(self) -> list[ConfigProblem]:
        shared, isabs = "an absolute path on shared storage", os.path.isabs
        checks = [
            (not self.driver, "driver", self.driver, "give the driver command after `--`"),
            (not isabs(self.ckpt_path or ""), "paths.ckpt_path", self.ckpt_path, f"set CKPT_PATH to {shared}"),
            (not isabs(self.log_dir or ""), "paths.log_dir", self.log_dir, f"set BEAM_LOG_DIR to {shared}"),
            (self.nodes < 1, "cluster.nodes", self.nodes, "use a node count of 1 or more"),
            (self.gpus_per_node < 0, "cluster.gpus_per_node", self.gpus_per_node, "use 0 or a GPU count"),
            (self.max_requeues < 0, "cluster.max_requeues", self.max_requeues, "use 0 (never requeue) or more"),
            (
                self.grace_s < 0 or self.stop_grace_s < 0,
                "cluster.grace_s/stop_grace_s",
                (self.grace_s, self.stop_grace_s),
                "use seconds >= 0",
            ),
        ]
        return [*self.ray.problems(), *(ConfigProblem(key, value, fix) for bad, key, value, fix in checks if bad)]


def _given(overrides: list[str], key: str) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") == key for o in overrides)


def allocation_overrides(overrides: list[str], environ: Mapping[str, str]) -> list[str]:
    """Overrides that make the recipe match the allocation: node and GPU counts, unless given explicitly."""
    extra = []
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
    if nodes and not _given(overrides, "cluster.nodes"):
        extra.append(f"cluster.nodes={int(nodes)}")
    gpus = environ.get("SLURM_GPUS_ON_NODE") or environ.get("SLURM_GPUS_PER_NODE", "").split(":")[-1]
    if gpus and gpus.isdigit() and not _given(overrides, "cluster.gpus_per_node"):
        extra.append(f"cluster.gpus_per_node={int(gpus)}")
    return extra


def resume_overrides(cfg_ckpt_path: str, environ: Mapping[str, str]) -> list[str]:
    """A requeued or restarted attempt resumes from the newest complete checkpoint of this run, when there is one."""
    if environ_attempt_label(environ) == "0":  # the job's first start
        return []
    if not (Path(cfg_ckpt_path) / "latest_ckpt_global_step.txt").is_file():
        return []  # nothing saved yet: keep the original mode (a from_path start stays from_path)
    return ["checkpoint.resume_mode=latest", "checkpoint.resume_path=null"]


def load_job_config(overrides: list[str], environ: Mapping[str, str]) -> BeamConfig:
    """The recipe as this attempt of the job runs it (allocation and resume applied); ConfigError when invalid."""
    following = allocation_overrides(overrides, environ)
    cfg = load_config(list(overrides) + following, validate=False)
    kept = [o for o in following if not o.startswith("cluster.nodes=")] if cfg.cluster.spare_nodes > 0 else following
    # With spares the allocation is nodes + spares: the recipe's node count trains (train_job checks the sum).
    assert cfg.paths.ckpt_path is not None  # load_config fills it when the recipe leaves it unset
    resume = resume_overrides(cfg.paths.ckpt_path, environ)
    if resume or kept != following:  # loaded again (~0.4 s of the job's bring-up) only when the first load changes it
        return load_config(list(overrides) + kept + resume)
    validate_config(cfg)
    return cfg


def job_mounts(cfg: BeamConfig) -> list[Mount]:
    """Same-path mounts for every directory the job touches, so paths mean the same inside a container."""
    p = cfg.paths
    read_only = [x for x in (p.model_path, p.data_dir, p.skyrl_dir, os.environ.get("BEAM_SLURM_HOME")) if x]
    # The Ray state dir holds the job's token and rendezvous files; it must be visible inside the container too.
    writable = [
        x
        for x in (p.ckpt_path, p.export_path, p.log_dir, p.optimizer_state_disk_dir, cfg.ray.resolved_state_dir())
        if x
    ]
    return same_path_mounts(read_only=read_only, writable=writable)


def job_settings(
    cfg: BeamConfig, *, preflight: bool = True, driver: list[str] | None = None
) -> tuple[TrainJobSettings, dict[str, str]]:
    """The recipe as `TrainJobSettings` and its driver's environment; `driver` replaces the recipe's trainer."""
    python = cfg.trainer.python if cfg.container.runtime != "none" else sys.executable
    driver_env: dict[str, str] = {}
    runs_skyrl = driver is None and cfg.trainer.backend == "skyrl"
    writes_heartbeats = driver is None  # SkyRL with our callback, or the rehearsal
    if driver is None:
        launch = skyrl_launch(cfg)
        driver = launch.argv(python)
        driver_env = {**launch.env, **job_env(cfg, os.environ)}  # one W&B run id across the attempts
        if launch.cwd:
            # SkyRL's examples/ import from the checkout root; the driver starts there on the head node.
            driver = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', launch.cwd, *driver]
    # Every node reads these in the job spec (names and paths only, no value): what to export, how to copy logs.
    manifest = env_manifest.describe(cfg, driver_env) if driver_env else None
    copy_settings = LogCopySettings.from_config(cfg) if driver_env else None
    needs, mounts, paths, cluster = node_needs(cfg), job_mounts(cfg), cfg.paths, cfg.cluster
    assert paths.ckpt_path is not None and paths.log_dir is not None  # load_config fills both when unset
    checks = PreflightSettings(
        readable_paths=[x for x in (paths.model_path, paths.data_dir) if x],
        skyrl_dir=(paths.skyrl_dir or "") if runs_skyrl else "",
        scratch_dir=paths.optimizer_state_disk_dir or "",
        scratch_need_bytes=needs.scratch_bytes,
        host_ram_need_bytes=needs.host_ram_bytes,
        ckpt_dir=paths.ckpt_path,
        ckpt_need_bytes=needs.ckpt_bytes,
        **preflight_budget(cfg),  # the measured write bandwidth is checked against the notice budget
        storage_probe_s=float(cluster.storage_probe_s),
        fabric=asdict(fabric_settings(cfg)),
    )
    run_info = {
        "run_name": cfg.run_name,
        "recipe": cfg.recipe,
        "export_path": str(paths.export_path),
        "ckpt_path": str(paths.ckpt_path),
        "log_dir": str(paths.log_dir),
        "max_training_steps": cfg.max_training_steps,
        "config_yaml": to_yaml(cfg),
    }
    return TrainJobSettings(
        driver=list(driver),
        ckpt_path=paths.ckpt_path,
        log_dir=paths.log_dir,
        nodes=cluster.nodes,
        gpus_per_node=cluster.gpus_per_node,
        max_requeues=cluster.max_requeues,
        spare_nodes=cluster.spare_nodes,
        max_in_job_attempts=cluster.max_in_job_attempts,
        grace_s=float(cluster.grace_s),
        stop_grace_s=float(cluster.stop_grace_s) + float(cluster.log_copy_s),
        preflight=preflight,
        preflight_checks=checks,
        container=lambda job_id: container_hook(cfg.container, mounts, job_id),
        ray=cfg.ray,
        python=python,
        max_attempts_without_progress=cluster.max_attempts_without_progress,
        save_cost=SaveCost.of(cfg),
        qos=cluster.qos or "",
        signal_before_s=cluster.signal_before_s,
        hang=HangLimits.of(cfg) if writes_heartbeats else HangLimits.disabled(),
        run_info=run_info,
        env_manifest=manifest,
        log_copy=copy_settings,
    ), driver_env
