"""`beam-slurm train [overrides]`: the recipe, inside the allocation that `sbatch/train_*.sh` got.

It loads and validates the recipe (the allocation's node and GPU counts win over the recipe's defaults unless given
explicitly), turns it into the driver command (SkyRL, or the rehearsal trainer), the Ray settings, the container
wrapping and the preflight checks, and hands them to `beam_slurm.slurm.train_job` (preflight, Ray across the nodes,
notices, save-on-notice, requeue). With `eval.chain=true` a watcher in this batch shell submits one evaluation job
per HF export as it appears; claim files on shared storage make that exactly once across requeues.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import threading
from pathlib import Path

from beam_slurm.config.errors import ConfigError

GIB = 1024**3


def _given(overrides: list[str], key: str) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") == key for o in overrides)


def allocation_overrides(overrides: list[str], environ) -> list[str]:
    """Overrides that make the recipe match the allocation: node and GPU counts, resume on a requeued attempt."""
    extra = []
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
    if nodes and not _given(overrides, "cluster.nodes"):
        extra.append(f"cluster.nodes={int(nodes)}")
    gpus = environ.get("SLURM_GPUS_ON_NODE") or environ.get("SLURM_GPUS_PER_NODE", "").split(":")[-1]
    if gpus and gpus.isdigit() and not _given(overrides, "cluster.gpus_per_node"):
        extra.append(f"cluster.gpus_per_node={int(gpus)}")
    return extra


def resume_overrides(cfg_ckpt_path: str, environ) -> list[str]:
    """A requeued attempt resumes from the newest complete checkpoint of this run, when there is one."""
    if int(environ.get("SLURM_RESTART_COUNT", "0") or 0) == 0:
        return []
    if not (Path(cfg_ckpt_path) / "latest_ckpt_global_step.txt").is_file():
        return []  # nothing saved yet: keep the original mode (a from_path start stays from_path)
    return ["checkpoint.resume_mode=latest", "checkpoint.resume_path=null"]


def job_mounts(cfg):
    """Same-path mounts for every directory the job touches, so paths mean the same inside a container."""
    from beam_slurm.containers.settings import same_path_mounts

    p = cfg.paths
    read_only = [x for x in (p.model_path, p.data_dir, p.skyrl_dir, os.environ.get("BEAM_SLURM_HOME")) if x]
    # The Ray state dir holds the job's token and rendezvous files; it must be visible inside the container too.
    writable = [x for x in (p.ckpt_path, p.export_path, p.log_dir, p.optimizer_state_disk_dir,
                            cfg.ray.resolved_state_dir()) if x]
    return same_path_mounts(read_only=read_only, writable=writable)


def preflight_needs(cfg) -> dict[str, int]:
    """Bytes each node must have free, from the seed's numbers (nothing for the rehearsal, which writes tiny files)."""
    from beam_slurm.plan import (CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE, FULL_CHECKPOINT_TB_TOTAL, OPTIMIZER_STATE_TB_TOTAL,
                                 checkpoints_kept)

    if cfg.trainer.backend == "rehearsal" or cfg.is_lora:
        return {"scratch": 0, "ram": 0, "ckpt": 0}
    nodes = max(cfg.training_nodes, 1)
    tb = 1000**4
    return {
        "scratch": int(OPTIMIZER_STATE_TB_TOTAL / nodes * tb) if cfg.paths.optimizer_state_disk_dir else 0,
        "ram": 0 if cfg.paths.optimizer_state_disk_dir else int(CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE * tb),
        # shared storage must hold every kept checkpoint; checked from one node's view of the shared folder
        "ckpt": int(FULL_CHECKPOINT_TB_TOTAL * checkpoints_kept(cfg) * tb),
    }


def job_settings(cfg, *, preflight: bool = True):
    """The recipe as `TrainJobSettings` for `train_job.run`."""
    from beam_slurm.skyrl.command import skyrl_launch
    from beam_slurm.slurm.preflight import PreflightSettings
    from beam_slurm.slurm.train_job import TrainJobSettings, container_hook

    launch = skyrl_launch(cfg)
    in_container = cfg.container.runtime != "none"
    python = cfg.trainer.python if in_container else sys.executable
    driver = launch.argv(python)
    if launch.cwd:
        # SkyRL's examples/ import from the checkout root; the driver starts there on the head node.
        driver = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', launch.cwd, *driver]
    needs = preflight_needs(cfg)
    readable = [x for x in (cfg.paths.model_path, cfg.paths.data_dir) if x]
    mounts = job_mounts(cfg)
    return TrainJobSettings(
        driver=driver,
        ckpt_path=cfg.paths.ckpt_path,
        log_dir=cfg.paths.log_dir,
        nodes=cfg.cluster.nodes,
        gpus_per_node=cfg.cluster.gpus_per_node,
        max_requeues=cfg.cluster.max_requeues,
        grace_s=float(cfg.cluster.grace_s),
        stop_grace_s=float(cfg.cluster.stop_grace_s),
        preflight=preflight,
        preflight_checks=PreflightSettings(
            readable_paths=readable,
            skyrl_dir=cfg.paths.skyrl_dir if cfg.trainer.backend == "skyrl" else "",
            scratch_dir=cfg.paths.optimizer_state_disk_dir or "",
            scratch_need_bytes=needs["scratch"],
            host_ram_need_bytes=needs["ram"],
            ckpt_dir=cfg.paths.ckpt_path,
            ckpt_need_bytes=needs["ckpt"],
        ),
        container=lambda job_id: container_hook(cfg.container, mounts, job_id),
        ray=cfg.ray,
        python=python,
    ), launch.env


class EvalChain:
    """Submits one evaluation per complete HF export while training runs, then makes a last pass."""

    def __init__(self, cfg, log):
        from beam_slurm.evaluation.chain import ChainSettings

        self.cfg = cfg
        self.log = log
        self.settings = ChainSettings(run_dir=Path(cfg.paths.export_path), poll_interval_s=cfg.eval.chain_poll_s,
                                      settle_s=cfg.eval.chain_settle_s)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="eval-chain", daemon=True)

    def submit(self, argv: list[str]) -> str:
        from beam_slurm.pipeline.stages import submit_eval

        checkpoint = argv[argv.index("--checkpoint") + 1]
        match = re.search(r"global_step_(\d+)", checkpoint)
        if not match:
            raise ValueError(f"not a global_step_N export: {checkpoint}")
        return submit_eval(self.cfg, int(match.group(1)), checkpoint, extra_args=list(self.cfg.eval.chain_extra_args))

    def _run(self) -> None:
        from beam_slurm.evaluation.chain import watch

        try:
            watch(self.settings, self.submit, self.stop.is_set, log=self.log, sleep=self.stop.wait)
        except Exception as exc:  # the chain must never take the training job down
            self.log(f"eval-chain: stopped after an error: {exc}")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=120)
        from beam_slurm.pipeline.stages import latest_checkpoint_step

        step = latest_checkpoint_step(self.cfg.paths.ckpt_path)
        if step is not None and step >= self.cfg.max_training_steps:
            # The run is over and nothing writes exports any more: the last export, seconds old, need not settle
            # (the watcher's settle time would otherwise leave it unevaluated for good).
            from beam_slurm.evaluation.chain import submit_pending

            try:
                submit_pending(dataclasses.replace(self.settings, settle_s=0.0), self.submit, self.log)
            except Exception as exc:  # the chain must never take the training job down
                self.log(f"eval-chain: last pass failed: {exc}")


def main(argv: list[str]) -> int:
    from beam_slurm.config import load_config
    from beam_slurm.slurm import train_job

    preflight = True
    if "--no-preflight" in argv:
        argv = [a for a in argv if a != "--no-preflight"]
        preflight = False
    overrides = list(argv) + allocation_overrides(argv, os.environ)
    try:
        cfg = load_config(overrides)
        cfg = load_config(overrides + resume_overrides(cfg.paths.ckpt_path, os.environ))
    except ConfigError as exc:
        exc.report()
        return exc.exit_code
    settings, driver_env = job_settings(cfg, preflight=preflight)
    os.environ.update(driver_env)  # reaches the Ray step and so the driver on the head node
    os.environ.setdefault("BEAM_SLURM_HOME", str(Path(__file__).resolve().parents[2]))
    pythonpath = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.environ["BEAM_SLURM_HOME"] + (os.pathsep + pythonpath if pythonpath else "")
    if not cfg.eval.chain:
        return train_job.run(settings)

    def log(message: str) -> None:
        print(f"[beam-slurm train] {message}", file=sys.stderr, flush=True)

    with EvalChain(cfg, log):
        return train_job.run(settings)
