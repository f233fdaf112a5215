"""Our SkyRL entrypoint: SkyRL's DAPO experiment plus save-on-notice and a training-metrics file.

Run in the training container from the root of a SkyRL checkout whose tag matches the installed wheel (so the DAPO
example imports), with SkyRL's DAPO overrides; ``BEAM_SKYRL_EXPERIMENT=base`` runs SkyRL's ``BasePPOExp`` instead.
Callbacks fire only in the process running SkyRL's training loop (the Ray task below), once per step. What SkyRL
0.3.0 does around them, which the callback relies on:

* ``on_step_end``: with a pending save request it sets ``control.should_save``; SkyRL saves at the end of the same
  step, the marker ``latest_ckpt_global_step.txt`` last.
* ``on_save`` fires after the checkpoint and its marker: it acknowledges and stops the run. SkyRL has no
  ``should_stop``; its loop ends when ``global_step > trainer.max_training_steps``, checked after every step against
  the live config, so the callback sets ``max_training_steps = global_step`` (the final save is skipped,
  ``on_train_end`` runs as usual). A scheduled HF export of that step is written after ``on_save``: the
  acknowledgement then waits for ``on_log``, so the job never stops Ray mid-export.
* every event writes the progress heartbeat; ``on_log`` appends the step's metrics to ``train_metrics.jsonl``.
"""

from __future__ import annotations

import logging
import os
import sys
from importlib import import_module
from pathlib import Path

from beam_slurm.core import notice
from beam_slurm.core.layout import STEP_DIR
from beam_slurm.core.logs import installed
from beam_slurm.core.progress import ProgressRecorder
from beam_slurm.core.ray_records import note_driver_error
from beam_slurm.core.train_metrics import TRAIN_METRICS_FILE, append_step_metrics
from beam_slurm.jobs.ray_cluster.driver_signals import hold_first_sigterm

logger = logging.getLogger(__spec__.name)  # its package name under `python -m` too (__name__ is "__main__")

# ray and skyrl are imported inside the functions, on purpose: only the trainer's environment has them.

DAPO_MODULE = "examples.train.algorithms.dapo.main_dapo"  # in the checkout's examples/, not in the wheel
EXPERIMENT_ENV = "BEAM_SKYRL_EXPERIMENT"  # dapo (default) or base

try:  # The callback base class exists only where SkyRL is installed (the 3.12 training environment).
    from skyrl.train.utils.callbacks import TrainingCallback as _CallbackBase
except ImportError:  # pragma: no cover - lets `plan` and docs import this module without SkyRL
    _CallbackBase = object


def _step_of_checkpoint(ckpt_dir: str | None, fallback: int) -> int:
    match = STEP_DIR.match(Path(ckpt_dir).name) if ckpt_dir else None
    return int(match[1]) if match else fallback


class SaveOnNoticeCallback(_CallbackBase):
    """Save at the next step boundary when the job asks, acknowledge, stop; append each step's metrics."""

    def __init__(self, ckpt_path: str, export_path: str | None = None):
        self.ckpt_path = ckpt_path  # where the request and acknowledgement files live
        self.export_path = export_path  # receives train_metrics.jsonl; None writes no metrics
        self.metrics_write_failures = 0
        self.stopped_at_step: int | None = None  # the step saved on notice, once the run was told to stop
        self.ack_after_export: int | None = None  # saved on notice, acknowledged in on_log after its HF export
        self.progress = ProgressRecorder(ckpt_path)
        self.progress.loading()  # built with the trainer, before its models load: the ledger's model_load begins

    def on_step_start(self, trainer, callback_input, control) -> None:
        self.progress.step_start(callback_input.global_step)

    def on_eval_start(self, trainer, callback_input, control) -> None:
        self.progress.eval_start(callback_input.global_step)

    def on_eval_end(self, trainer, callback_input, control) -> None:
        self.progress.eval_end(callback_input.global_step)

    def on_train_start(self, trainer, callback_input, control) -> None:
        request = notice.pending_request(self.ckpt_path)
        if request is not None:
            logger.info(f"a save request is already pending ({request.get('reason')}); saving after the first step")

    def on_step_end(self, trainer, callback_input, control) -> None:
        self.progress.step_end(callback_input.global_step)
        if self.stopped_at_step is not None:
            return
        request = notice.pending_request(self.ckpt_path)
        if request is not None:
            logger.info(
                f"save requested ({request.get('reason')}); saving at the end of step {callback_input.global_step}"
            )
            control.should_save = True

    def on_save(self, trainer, callback_input, control) -> None:
        self.progress.saved(callback_input.global_step)
        if self.stopped_at_step is not None or notice.pending_request(self.ckpt_path) is None:
            return
        step = _step_of_checkpoint(callback_input.ckpt_path, callback_input.global_step)
        trainer_cfg = trainer.cfg.trainer
        # SkyRL decided before on_save whether this step writes an HF export; it writes it right after on_save.
        export_due = trainer_cfg.hf_save_interval > 0 and callback_input.global_step % trainer_cfg.hf_save_interval == 0
        self.stopped_at_step = step
        trainer_cfg.max_training_steps = step  # the loop checks `global_step > max_training_steps` after each step
        trainer_cfg.eval_interval = -1  # this step's eval would only spend the grace period
        trainer_cfg.hf_save_interval = -1  # so would the HF export at the end of training
        if export_due:
            self.ack_after_export = step
            logger.info(
                f"checkpoint of step {step} saved on notice; acknowledging once this step's HF export is written"
            )
            return
        notice.acknowledge(self.ckpt_path, step)
        logger.info(
            f"checkpoint of step {step} saved on notice; stopping after this step (resume with resume_mode=latest)"
        )

    def _acknowledge_deferred(self) -> None:
        if self.ack_after_export is not None:
            step, self.ack_after_export = self.ack_after_export, None
            notice.acknowledge(self.ckpt_path, step)
            logger.info(f"HF export of step {step} written; stopping after this step (resume with resume_mode=latest)")

    def on_train_end(self, trainer, callback_input, control) -> None:
        self.progress.finished(callback_input.global_step)
        self._acknowledge_deferred()  # a safety net: on_log normally comes first

    def on_log(self, trainer, callback_input, control) -> None:
        self._acknowledge_deferred()  # on_log fires after the step's HF export
        if self.export_path is None or not callback_input.logs:
            return
        try:
            append_step_metrics(self.export_path, callback_input.global_step, callback_input.logs)
        except Exception as exc:  # a metrics file is never worth a training run
            self.metrics_write_failures += 1
            logger.info(
                f"could not append step {callback_input.global_step} to {self.export_path}/{TRAIN_METRICS_FILE} "
                f"({type(exc).__name__}: {exc}); training continues"
            )


def _experiment_classes(kind: str):
    """(config class, experiment class) for ``kind`` in {dapo, base}; exits 2 with the fix if unavailable."""
    if kind == "base":
        from skyrl.train.config import SkyRLTrainConfig
        from skyrl.train.entrypoints.main_base import BasePPOExp

        return SkyRLTrainConfig, BasePPOExp
    if kind != "dapo":
        print(f"{EXPERIMENT_ENV}={kind!r} is not known; use 'dapo' (default) or 'base'", file=sys.stderr)
        raise SystemExit(2)
    try:
        dapo = import_module(DAPO_MODULE)
    except ModuleNotFoundError as exc:
        print(
            f"cannot import {DAPO_MODULE} ({exc}); run this entrypoint from the root of a SkyRL checkout matching "
            f"the installed skyrl version (cwd is {os.getcwd()}), or set {EXPERIMENT_ENV}=base",
            file=sys.stderr,
        )
        raise SystemExit(2) from exc
    return dapo.DAPOConfig, dapo.DAPOExp


def with_save_on_notice(experiment_cls):
    """A subclass of a SkyRL experiment whose trainer carries a :class:`SaveOnNoticeCallback`."""

    class SaveOnNoticeExperiment(experiment_cls):
        def get_trainer(self, *args, **kwargs):
            trainer = super().get_trainer(*args, **kwargs)
            self.save_on_notice = SaveOnNoticeCallback(self.cfg.trainer.ckpt_path, self.cfg.trainer.export_path)
            trainer.add_callback(self.save_on_notice)
            return trainer

    SaveOnNoticeExperiment.__name__ = f"SaveOnNotice{experiment_cls.__name__}"
    return SaveOnNoticeExperiment


def _run_experiment(cfg, kind: str) -> int | None:
    """Body of the Ray task (SkyRL runs the loop in a task, not in the driver). Returns the step saved on notice."""
    _, experiment_cls = _experiment_classes(kind)
    experiment = with_save_on_notice(experiment_cls)(cfg)
    with installed("beam_slurm", "[beam callback] "):
        experiment.run()
    return experiment.save_on_notice.stopped_at_step


def main(argv: list[str] | None = None) -> int:
    import ray
    from skyrl.train.utils import initialize_ray, validate_cfg

    args = list(sys.argv[1:] if argv is None else argv)
    kind = os.environ.get(EXPERIMENT_ENV, "dapo")
    config_cls, _ = _experiment_classes(kind)
    cfg = config_cls.from_cli_overrides(args)
    validate_cfg(cfg)
    initialize_ray(cfg)
    hold_first_sigterm()  # a preemption's SIGTERM to the tasks may be a notice (after ray.init's own handler)
    # Imported by module name (also under `python -m`) so Ray ships a reference, not a pickled copy of __main__.
    from beam_slurm.jobs.training.entrypoint import _run_experiment

    # Same placement as SkyRL's own entrypoint: one CPU, wherever Ray puts it.
    task = ray.remote(num_cpus=1)(_run_experiment)
    try:
        stopped_at = ray.get(task.remote(cfg, kind))
    except Exception as exc:
        note_driver_error(exc)  # a full checkpoint storage or a dead Ray worker: the requeue policy reads it
        raise
    print(
        "training finished"
        if stopped_at is None
        else f"stopped on notice after saving step {stopped_at}; the next attempt resumes from it",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
