"""`beam-slurm train [overrides]`: the recipe, inside the allocation that `sbatch/train_*.sh` got, as the job settings
(`beam_slurm.jobs.training.job_settings`) that `beam_slurm.jobs.training.train_job` runs; with `eval.chain=true` the
`EvalChain` too."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from pathlib import Path

from beam_slurm import REPO_ROOT
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, schema_keys
from beam_slurm.core import layout
from beam_slurm.core.errors import ConfigError
from beam_slurm.core.logs import installed
from beam_slurm.jobs.training import site_setup, train_job
from beam_slurm.jobs.training.job_settings import job_settings, load_job_config
from beam_slurm.launch.chain import ChainSettings, submit_pending, watch
from beam_slurm.launch.eval_request import submit_for_checkpoint

logger = logging.getLogger(__name__)


class EvalChain:
    """Submits one evaluation per complete HF export while training runs, then makes a last pass."""

    def __init__(self, cfg: BeamConfig):
        self.cfg = cfg
        assert cfg.paths.export_path is not None  # fill_defaults sets it
        self.settings = ChainSettings(
            run_dir=Path(cfg.paths.export_path), poll_interval_s=cfg.eval.chain_poll_s, settle_s=cfg.eval.chain_settle_s
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="eval-chain", daemon=True)

    def submit(self, step: int, checkpoint: Path) -> str:
        # The same path as `beam-slurm evaluate --checkpoint`: a submitit job array, one task per dataset.
        return submit_for_checkpoint(self.cfg, step, str(checkpoint), list(self.cfg.eval.chain_extra_args))

    def _run(self) -> None:
        try:
            watch(self.settings, self.submit, self.stop.is_set, sleep=self.stop.wait)
        except Exception as exc:  # the chain must never take the training job down
            logger.info(f"eval-chain: stopped after an error: {exc}")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=120)
        assert self.cfg.paths.ckpt_path is not None  # fill_defaults sets it
        step = layout.latest_checkpoint_step(self.cfg.paths.ckpt_path)
        if step is not None and step >= self.cfg.max_training_steps:
            # The run is over and nothing writes exports any more: the last export, seconds old, need not settle
            # (the watcher's settle time would otherwise leave it unevaluated for good).
            try:
                submit_pending(dataclasses.replace(self.settings, settle_s=0.0), self.submit)
            except Exception as exc:  # the chain must never take the training job down
                logger.info(f"eval-chain: last pass failed: {exc}")


def build_parser():
    verb = VerbArgs(
        "train",
        "Run inside the allocation of sbatch/train_*.sh: preflight, Ray across the nodes, the "
        "driver, notices and requeue.",
        keys=list(schema_keys()),
    )
    verb.add_argument("--no-preflight", action="store_true", help="skip the per-node preflight checks")
    return verb


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        parsed = verb.parse(argv)
        cfg = load_job_config(parsed.overrides, os.environ)
    except (VerbUsageError, ConfigError) as exc:
        return verb.report(exc, what="; nothing was submitted")
    if site_setup.needed(cfg.cluster.setup):
        site_setup.exec_after_setup(cfg.cluster.setup)  # runs this command again after them
    preflight = not parsed.args.no_preflight
    settings, driver_env = job_settings(cfg, preflight=preflight)
    os.environ.update(driver_env)  # reaches the Ray step and so the driver on the head node
    os.environ.setdefault("BEAM_SLURM_HOME", str(REPO_ROOT))
    pythonpath = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.environ["BEAM_SLURM_HOME"] + (os.pathsep + pythonpath if pythonpath else "")

    def rebuild():  # for a restart in the allocation: the driver resumes from the latest checkpoint
        return job_settings(load_job_config(parsed.overrides, os.environ), preflight=preflight)[0]

    chain = EvalChain(cfg) if cfg.eval.chain else contextlib.nullcontext()
    with installed(("beam_slurm.launch", __name__), "[beam-slurm train] "), chain:  # the attempts write their own
        return train_job.run(settings, rebuild)
