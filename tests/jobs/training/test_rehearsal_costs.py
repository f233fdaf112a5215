"""The rehearsal's realistic costs: model-load seconds, step seconds, and saves that write and fsync real bytes over
real seconds; a save cut off by a kill is never the resume point. From the recipe key to the driver's environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from test_rehearsal import ray_head, rehearsal  # noqa: F401  (the module's private Ray head)

from beam_slurm.config.load import load_config
from beam_slurm.config.skyrl_command import skyrl_launch
from beam_slurm.jobs.training.rehearsal import PAYLOAD_FILE, RehearsalSettings, resume_step

MIB = 1024 * 1024


def test_recipe_costs_reach_the_rehearsal_environment(monkeypatch):
    monkeypatch.setenv("BEAM_REHEARSAL_STEP_SECONDS", "0.5")
    cfg = load_config(["recipe=lora_16gpu", "paths.model_path=/m", "paths.data_dir=/d", "trainer.backend=rehearsal",
                       "trainer.rehearsal_save_s=13", "trainer.rehearsal_save_bytes=200000000",
                       "trainer.rehearsal_model_load_s=4"])
    env = skyrl_launch(cfg).env
    assert env["BEAM_REHEARSAL_STEP_SECONDS"] == "0.5"  # the variable users already set, read as the key's value
    assert env["BEAM_REHEARSAL_SAVE_SECONDS"] == "13.0"
    assert env["BEAM_REHEARSAL_SAVE_BYTES"] == "200000000"
    assert env["BEAM_REHEARSAL_MODEL_LOAD_SECONDS"] == "4.0"
    monkeypatch.delenv("BEAM_REHEARSAL_STEP_SECONDS")
    fast = skyrl_launch(load_config(["recipe=lora_16gpu", "paths.model_path=/m", "paths.data_dir=/d",
                                     "trainer.backend=rehearsal"])).env
    assert fast["BEAM_REHEARSAL_SAVE_SECONDS"] == "0.0" and fast["BEAM_REHEARSAL_SAVE_BYTES"] == "0"


def test_a_bad_cost_is_refused_by_key_and_variable(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "beam_slurm.jobs.training.rehearsal", "trainer.max_training_steps=3",
                           f"trainer.ckpt_path={tmp_path}/c", f"trainer.export_path={tmp_path}/e"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "BEAM_REHEARSAL_SAVE_BYTES": "1GB"})
    assert proc.returncode == 2, proc.stderr
    assert "trainer.rehearsal_save_bytes='1GB' (from BEAM_REHEARSAL_SAVE_BYTES)" in proc.stderr


def test_model_load_and_a_save_that_writes_real_bytes(ray_head, tmp_path):  # noqa: F811
    env_costs = {"BEAM_REHEARSAL_SAVE_BYTES": str(24 * MIB), "BEAM_REHEARSAL_SAVE_SECONDS": "1.5",
                 "BEAM_REHEARSAL_MODEL_LOAD_SECONDS": "1"}
    os.environ.update(env_costs)
    try:
        proc = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=3")
    finally:
        for name in env_costs:
            os.environ.pop(name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[rehearsal] loading the model (1 s)" in proc.stdout
    payload = tmp_path / "ckpts" / "global_step_3" / "policy" / PAYLOAD_FILE
    assert payload.stat().st_size == 24 * MIB
    took = [float(line.split(" in ")[1].split(" s")[0]) for line in proc.stdout.splitlines()
            if line.startswith("[rehearsal] saved step 3 in ")]
    assert took and took[0] >= 1.5, proc.stdout
    assert (tmp_path / "ckpts" / "latest_ckpt_global_step.txt").read_text() == "3"


SAVE_TWO = """
import sys
from beam_slurm.jobs.training.rehearsal import RehearsalSettings, save_checkpoint
s = RehearsalSettings(max_training_steps=9, ckpt_path=sys.argv[1], ckpt_interval=3)
save_checkpoint(s, 3, 0)
s.save_bytes, s.save_s = 64 * 1024 * 1024, 60.0
print("saving 6", flush=True)
save_checkpoint(s, 6, 0)
"""


def test_a_save_cut_off_is_never_the_resume_point(tmp_path):
    ckpt = tmp_path / "ckpts"
    proc = subprocess.Popen([sys.executable, "-c", SAVE_TWO, str(ckpt)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "saving 6"
    payload = ckpt / "global_step_6" / "policy" / PAYLOAD_FILE
    deadline = time.monotonic() + 30
    while not (payload.exists() and payload.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)  # as Slurm's SIGKILL at the end of the grace time
    proc.wait(timeout=30)
    assert 0 < payload.stat().st_size < 64 * MIB, "killed half-way through the payload"
    assert not (ckpt / "global_step_6" / "trainer_state.pt").exists()
    assert (ckpt / "latest_ckpt_global_step.txt").read_text() == "3"
    settings = RehearsalSettings(max_training_steps=9, ckpt_path=str(ckpt), ckpt_interval=3, resume_mode="latest")
    assert resume_step(settings) == 3
