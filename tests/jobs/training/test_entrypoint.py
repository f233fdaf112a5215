"""Save-on-notice and the training-metrics file inside SkyRL: our callback against SkyRL 0.3.0's real callback
classes and config.

What runs here (CPU, .venv-skyrl): SaveOnNoticeCallback through SkyRL's CallbackHandler and TrainingControl, with a
real SkyRLTrainConfig as trainer.cfg. The training loop itself needs GPUs; `LoopDouble` below is a test double that
reproduces only the control flow of RayPPOTrainer.train() that the callback relies on, and
test_trainer_loop_still_has_the_hooks_we_rely_on pins that control flow in the installed trainer.py so the double
cannot drift from it silently.
"""

from __future__ import annotations

import json

import pytest
from skyrl_venv import run_in_skyrl_venv

from beam_slurm.core.train_metrics import TRAIN_METRICS_FILE
from beam_slurm.launch import run_results

pytestmark = pytest.mark.skyrl

LOOP_DOUBLE = r'''
import contextlib, io, json, os, sys, threading
import numpy as np
from skyrl.train.config.config import SkyRLTrainConfig
from skyrl.train.utils.callbacks import CallbackHandler, CallbackInput, TrainingControl
from beam_slurm.core import notice
from beam_slurm.core.logs import installed
from beam_slurm.jobs.training.entrypoint import SaveOnNoticeCallback, with_save_on_notice

ckpt, request_at_step, export = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = SkyRLTrainConfig.from_cli_overrides([
    f"trainer.ckpt_path={ckpt}", f"trainer.export_path={export}", "trainer.max_training_steps=50", "trainer.ckpt_interval=10",
    "trainer.eval_interval=5", "trainer.hf_save_interval=10", "trainer.logger=console",
])

class LoopDouble:
    """Test double of RayPPOTrainer.train()'s control flow (steps 8-11 and the end-of-training saves)."""
    def __init__(self, cfg):
        self.cfg, self.global_step = cfg, 0
        self._callback_handler, self._training_control = CallbackHandler(), TrainingControl()
        self.events = []
    def add_callback(self, cb):
        self._callback_handler.add(cb)
    def _fire(self, name, **fields):
        cb_input = CallbackInput(global_step=self.global_step, epoch=0, total_steps=50, steps_per_epoch=1000, **fields)
        getattr(self._callback_handler, name)(self, cb_input, self._training_control)
    def save_checkpoints(self):
        d = os.path.join(self.cfg.trainer.ckpt_path, f"global_step_{self.global_step}")
        os.makedirs(os.path.join(d, "policy"), exist_ok=True)
        with open(os.path.join(self.cfg.trainer.ckpt_path, "latest_ckpt_global_step.txt"), "w") as f:
            f.write(str(self.global_step))
        self.events.append(("save", self.global_step))
        return d
    def train(self):
        self._fire("on_train_start")
        self.global_step = 1
        will_save = hf_save = False
        while True:
            if self.global_step == request_at_step:
                notice.request_save(self.cfg.trainer.ckpt_path, "SIGUSR1 (test)")
            self._fire("on_step_end")
            force_save = self._training_control.should_save
            self._training_control.should_save = False
            t = self.cfg.trainer
            hf_save = t.hf_save_interval > 0 and self.global_step % t.hf_save_interval == 0
            will_save = force_save or (t.ckpt_interval > 0 and self.global_step % t.ckpt_interval == 0)
            if will_save:
                path = self.save_checkpoints()
                self._fire("on_save", ckpt_path=path)
            if hf_save:
                # the export is written after on_save; record whether the job had already been told "saved"
                self.events.append(("hf", self.global_step))
                self.events.append(("acked_before_export", notice.saved_since(self.cfg.trainer.ckpt_path, 0.0)))
            eval_metrics = {}
            if t.eval_interval > 0 and self.global_step % t.eval_interval == 0:
                self.events.append(("eval", self.global_step))
                eval_metrics = {"eval/aime2025/avg_score": 0.25}
            # the payload SkyRL hands to on_log: numpy scalars included, as its metric code produces them
            progress = self.global_step / 50
            self._fire("on_log", logs={"reward/avg_raw_reward": np.float32(progress - 0.5),
                                       "generate/avg_num_tokens": np.float64(900 + 10 * self.global_step),
                                       "trainer/global_step": self.global_step, "timing/step": 1.5, **eval_metrics})
            self.global_step += 1
            if t.max_training_steps is not None and self.global_step > t.max_training_steps:
                break
        self.global_step -= 1
        if self.cfg.trainer.ckpt_interval > 0 and not will_save:
            self._fire("on_save", ckpt_path=self.save_checkpoints())
        if self.cfg.trainer.hf_save_interval > 0 and not hf_save:
            self.events.append(("hf", self.global_step))
        self._fire("on_train_end")

class ExperimentDouble:
    """Test double of BasePPOExp: only get_trainer, which our subclass extends."""
    def __init__(self, cfg):
        self.cfg = cfg
    def get_trainer(self):
        return LoopDouble(self.cfg)

exp = with_save_on_notice(ExperimentDouble)(cfg)
trainer = exp.get_trainer()
messages = io.StringIO()
# the callback's own log lines, returned below, written as `_run_experiment` writes them
with contextlib.redirect_stderr(messages), installed("beam_slurm", "[beam callback] "):
    trainer.train()
sys.stderr.write(messages.getvalue())
print(json.dumps({
    "events": trainer.events, "last_step": trainer.global_step,
    "stopped_at": exp.save_on_notice.stopped_at_step,
    "is_skyrl_callback": type(exp.save_on_notice).__mro__[1].__module__,
    "saved_since": notice.saved_since(ckpt, 0.0), "pending": notice.pending_request(ckpt),
    "marker": open(os.path.join(ckpt, "latest_ckpt_global_step.txt")).read(),
    "metrics_write_failures": exp.save_on_notice.metrics_write_failures,
    "messages": messages.getvalue().splitlines(),
}))
'''


def run_loop(tmp_path, request_at_step: int, export=None) -> dict:
    export = export or tmp_path / "exports"
    return run_in_skyrl_venv(LOOP_DOUBLE, str(tmp_path / "ckpts"), str(request_at_step), str(export))


def logged_steps(tmp_path) -> list[int]:
    path = tmp_path / "exports" / TRAIN_METRICS_FILE
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_notice_saves_at_next_step_and_stops(tmp_path):
    out = run_loop(tmp_path, 13)
    assert out["is_skyrl_callback"] == "skyrl.train.utils.callbacks"
    # interval saves at 10, then the notice during step 13 saves 13 and stops there: no step 14
    assert [e for e in out["events"] if e[0] == "save"] == [["save", 10], ["save", 13]]
    assert out["last_step"] == 13 and out["stopped_at"] == 13 and out["marker"] == "13"
    # eval at 5 and 10 happened; no eval or HF export spent in the grace period after the notice save
    assert ["eval", 10] in out["events"] and not any(e[1] > 10 for e in out["events"] if e[0] in ("eval", "hf"))
    assert out["saved_since"] == 13 and out["pending"] is None
    assert logged_steps(tmp_path) == list(range(1, 14))  # the step saved on notice is logged too


def test_notice_on_an_interval_step_saves_once(tmp_path):
    out = run_loop(tmp_path, 20)
    assert [e for e in out["events"] if e[0] == "save"] == [["save", 10], ["save", 20]]
    assert out["last_step"] == 20 and out["saved_since"] == 20


def test_notice_on_an_export_step_is_acknowledged_after_the_export(tmp_path):
    """Step 20 is an HF export step: the job must not hear "saved" (and stop Ray) before the export is written."""
    out = run_loop(tmp_path, 20)
    assert ["hf", 20] in out["events"]
    acked = [e[1] for e in out["events"] if e[0] == "acked_before_export"]
    assert acked == [None, None]  # neither the step-10 export nor the step-20 export had an acknowledgement yet
    assert out["saved_since"] == 20 and out["pending"] is None


def test_without_notice_the_run_is_unchanged(tmp_path):
    out = run_loop(tmp_path, 0)
    assert [e[1] for e in out["events"] if e[0] == "save"] == [10, 20, 30, 40, 50]
    assert out["last_step"] == 50 and out["stopped_at"] is None and out["saved_since"] is None
    assert [e[1] for e in out["events"] if e[0] == "eval"] == list(range(5, 51, 5))
    assert logged_steps(tmp_path) == list(range(1, 51)) and out["metrics_write_failures"] == 0


def test_on_log_writes_the_metrics_file_the_report_reads(tmp_path):
    run_loop(tmp_path, 0)
    lines = [json.loads(line) for line in (tmp_path / "exports" / TRAIN_METRICS_FILE).read_text().splitlines()]
    assert list(lines[0]) == ["step", "reward/avg_raw_reward", "generate/avg_num_tokens", "trainer/global_step",
                              "timing/step"]
    assert lines[9]["step"] == 10 and lines[9]["eval/aime2025/avg_score"] == 0.25
    assert lines[49]["generate/avg_num_tokens"] == 1400.0 and lines[49]["reward/avg_raw_reward"] == 0.5
    gathered = run_results.gather(tmp_path / "exports")  # the real reader, in the product's own environment
    assert sorted(gathered.train) == list(range(1, 51)) and not gathered.problems
    assert gathered.train[25][run_results.REWARD_KEY] == 0.0 and gathered.train[25][run_results.LENGTH_KEY] == 1150.0


def test_a_failing_metrics_write_does_not_stop_training(tmp_path):
    blocked = tmp_path / "not_a_directory"
    blocked.write_text("a file where the export directory should be")
    out = run_loop(tmp_path, 0, export=blocked)
    assert out["last_step"] == 50 and out["metrics_write_failures"] == 50
    assert f"could not append step 7 to {blocked}/{TRAIN_METRICS_FILE}" in out["messages"][6]
    assert "training continues" in out["messages"][6]
    assert [e[1] for e in out["events"] if e[0] == "save"] == [10, 20, 30, 40, 50]


PIN_TRAINER = r'''
import importlib.util, json, re
# Read the installed source rather than importing it: trainer.py pulls in the GPU stack.
text = open(importlib.util.find_spec("skyrl.train.trainer").origin).read()
def method(name):
    start = text.index(f"    async def {name}(") if f"    async def {name}(" in text else text.index(f"    def {name}(")
    end = re.compile(r"\n    (async )?def ").search(text, start + 10).start()
    return text[start:end]
src = method("train")
needles = [
    'self._fire("on_step_end"',
    "force_save = self._training_control.should_save",
    "will_save_ckpts = force_save or ckpt_interval_save",
    'self._fire("on_save", ckpt_path=ckpt_path)',
    "self.cfg.trainer.eval_interval > 0 and (",
    'self._fire("on_log", logs=log_payload)',
    "self.global_step > self.cfg.trainer.max_training_steps",
    "if self.cfg.trainer.ckpt_interval > 0 and not will_save_ckpts:",
    "if self.cfg.trainer.hf_save_interval > 0 and not hf_model_save:",
]
order = [src.find(n) for n in needles]
save_src = method("save_checkpoints")
print(json.dumps({"order": order,
                  "marker_before_return": save_src.find("latest_ckpt_global_step.txt") < save_src.find("return global_step_folder"),
                  "has_add_callback": "    def add_callback(self, callback" in text}))
'''


def test_trainer_loop_still_has_the_hooks_we_rely_on():
    out = run_in_skyrl_venv(PIN_TRAINER)
    assert all(i >= 0 for i in out["order"]), out["order"]
    assert out["order"] == sorted(out["order"])
    assert out["marker_before_return"] and out["has_add_callback"]
