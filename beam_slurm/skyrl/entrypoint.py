"""Our SkyRL entrypoint: SkyRL's DAPO experiment plus save-on-notice and a training-metrics file.

Run inside the training container (Python 3.12, skyrl 0.3.0) from the root of a SkyRL checkout whose tag matches the
installed wheel, so that ``examples.train.algorithms.dapo.main_dapo`` imports::

    cd $SKYRL_CHECKOUT && python -m beam_slurm.skyrl.entrypoint key=value ...

It takes exactly the overrides SkyRL's DAPO entrypoint takes and behaves the same, with one addition, a
:class:`SaveOnNoticeCallback` registered on the trainer. Callbacks fire only in the process that runs SkyRL's training
loop (the Ray task started below), so everything here happens once per step, not once per GPU worker:

* ``on_step_end``: if the Slurm job has asked for a save (:func:`beam_slurm.skyrl.notice.pending_request`), set
  ``control.should_save``. SkyRL 0.3.0 reads that flag right after ``on_step_end`` and saves at the end of the same
  step (trainer.py, step 8), writing ``latest_ckpt_global_step.txt`` last.
* ``on_save`` (fires after the checkpoint and its marker are written): acknowledge the request
  (:func:`beam_slurm.skyrl.notice.acknowledge`) and make the run stop. SkyRL has no ``should_stop`` flag; its loop ends
  when ``global_step > cfg.trainer.max_training_steps``, checked after every step against the live config object.
  So the callback sets ``trainer.cfg.trainer.max_training_steps = global_step``: the loop breaks after this step's
  logging, the final "safety net" save is skipped (this step already saved), and ``on_train_end`` runs as in any
  normal finish. It also turns off the rest of this step's work that would only spend the grace period: the eval
  of this step (``eval_interval = -1``; it is read after the save) and the final HF export (``hf_save_interval = -1``).
  When SkyRL writes a scheduled HF export in that step (after ``on_save``), the acknowledgement waits for ``on_log``,
  which fires after the export, so the job never stops Ray in the middle of writing it and the export stays complete
  for chained evaluation. The requeued attempt resumes from the marker with ``resume_mode=latest``.
* every event also writes the progress heartbeat (:mod:`beam_slurm.skyrl.progress`): step start and end, ``on_save``,
  evaluation start and end, the end of training. The job's hang watchdog reads it.
* ``on_log`` (fires with the dict SkyRL is about to send to its tracker, once per step and once for the eval before
  training): append ``{"step": global_step, **logs}`` as one line to ``{export_path}/train_metrics.jsonl``
  (:mod:`beam_slurm.skyrl.train_metrics`), the file ``beam-slurm report`` plots. A failed write is logged and training
  goes on; the metrics also reach SkyRL's own tracker.

``BEAM_SKYRL_EXPERIMENT=base`` runs SkyRL's plain ``BasePPOExp`` (no overlong penalty, no DAPO-only keys) instead.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module
from pathlib import Path

from beam_slurm.ray_cluster.driver_signals import hold_first_sigterm
from beam_slurm.skyrl import notice
from beam_slurm.skyrl.progress import ProgressRecorder
from beam_slurm.skyrl.train_metrics import TRAIN_METRICS_FILE, append_step_metrics

# Imported inside the functions that use it, on purpose: ray, skyrl (the trainer's environment only; the module itself
# is read by the submit side).

DAPO_MODULE = "examples.train.algorithms.dapo.main_dapo"
"""SkyRL's DAPO experiment; lives in the checkout's examples/, not in the wheel."""
EXPERIMENT_ENV = "BEAM_SKYRL_EXPERIMENT"
"""Environment variable choosing the experiment: ``dapo`` (default) or ``base``."""

try:  # The callback base class exists only where SkyRL is installed (the 3.12 training environment).
    from skyrl.train.utils.callbacks import TrainingCallback as _CallbackBase
except ImportError:  # pragma: no cover - lets `plan` and docs import this module without SkyRL
    _CallbackBase = object


def _log(message: str) -> None:
    print(f"[beam callback] {message}", file=sys.stderr, flush=True)


def _step_of_checkpoint(ckpt_dir: str | None, fallback: int) -> int:
    name = Path(ckpt_dir).name if ckpt_dir else ""
    if name.startswith("global_step_"):
        try:
            return int(name[len("global_step_"):])
        except ValueError:
            pass
    return fallback


class SaveOnNoticeCallback(_CallbackBase):
    """Save at the next step boundary when the job asks, acknowledge, then stop the run cleanly; also append every
    logged step's metrics to ``{export_path}/train_metrics.jsonl``."""

    def __init__(self, ckpt_path: str, export_path: str | None = None):
        self.ckpt_path = ckpt_path
        """Root checkpoint directory (``trainer.ckpt_path``): where the request and acknowledgement files live."""
        self.export_path = export_path
        """Run export directory (``trainer.export_path``) receiving train_metrics.jsonl; None writes no metrics."""
        self.metrics_write_failures = 0
        """Logged steps whose metrics line could not be written (each one logged; training went on)."""
        self.stopped_at_step: int | None = None
        """Step saved on notice, once the run has been told to stop (None while training normally)."""
        self.ack_after_export: int | None = None
        """Step saved on notice whose scheduled HF export SkyRL writes after on_save: acknowledged in on_log, once the
        export is complete, so the job does not stop Ray in the middle of writing it."""
        self.progress = ProgressRecorder(ckpt_path)
        """The heartbeat the job's hang watchdog reads."""

    def on_step_start(self, trainer, callback_input, control) -> None:
        self.progress.step_start(callback_input.global_step)

    def on_eval_start(self, trainer, callback_input, control) -> None:
        self.progress.eval_start(callback_input.global_step)

    def on_eval_end(self, trainer, callback_input, control) -> None:
        self.progress.eval_end(callback_input.global_step)

    def on_train_start(self, trainer, callback_input, control) -> None:
        request = notice.pending_request(self.ckpt_path)
        if request is not None:
            _log(f"a save request is already pending ({request.get('reason')}); saving after the first step")

    def on_step_end(self, trainer, callback_input, control) -> None:
        self.progress.step_end(callback_input.global_step)
        if self.stopped_at_step is not None:
            return
        request = notice.pending_request(self.ckpt_path)
        if request is not None:
            _log(f"save requested ({request.get('reason')}); saving at the end of step {callback_input.global_step}")
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
            _log(f"checkpoint of step {step} saved on notice; acknowledging once this step's HF export is written")
            return
        notice.acknowledge(self.ckpt_path, step)
        _log(f"checkpoint of step {step} saved on notice; stopping after this step (resume with resume_mode=latest)")

    def _acknowledge_deferred(self) -> None:
        if self.ack_after_export is not None:
            step, self.ack_after_export = self.ack_after_export, None
            notice.acknowledge(self.ckpt_path, step)
            _log(f"HF export of step {step} written; stopping after this step (resume with resume_mode=latest)")

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
            _log(f"could not append step {callback_input.global_step} to {self.export_path}/{TRAIN_METRICS_FILE} "
                 f"({type(exc).__name__}: {exc}); training continues")


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
            f"cannot import {DAPO_MODULE} ({exc}); run this entrypoint from the root of a SkyRL checkout "
            f"matching the installed skyrl version (cwd is {os.getcwd()}), or set {EXPERIMENT_ENV}=base",
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
    from beam_slurm.skyrl.entrypoint import _run_experiment

    # Same placement as SkyRL's own entrypoint: one CPU, wherever Ray puts it.
    task = ray.remote(num_cpus=1)(_run_experiment)
    stopped_at = ray.get(task.remote(cfg, kind))
    if stopped_at is not None:
        print(f"stopped on notice after saving step {stopped_at}; the next attempt resumes from it", flush=True)
    else:
        print("training finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
