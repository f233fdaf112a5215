"""`beam-slurm doctor --probe --write lab` on the Slurm sandbox, then `beam-slurm plan cluster=lab`, as a user runs
them (real subprocesses): the profile holds the partition examined and the probe's measurements, `plan` takes the
partition and the measured notice lead from it and marks them, and a key on the command line still wins."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from json_output_checks import assert_json_valid

pytestmark = [pytest.mark.sandbox, pytest.mark.slurm_semantics]

REPO_ROOT = Path(__file__).resolve().parents[2]
BEAM = str(REPO_ROOT / ".venv" / "bin" / "beam-slurm")


def beam(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([BEAM, *argv], env=env, capture_output=True, text=True, timeout=200,
                          stdin=subprocess.DEVNULL)


def test_doctor_writes_a_profile_that_plan_reads_and_the_command_line_overrules(slurm_sandbox):
    home = slurm_sandbox.new_dir("doctor-write")
    env = slurm_sandbox.env({"HOME": str(home), "BEAM_SLURM_CONFIG_DIR": str(home / "config")})
    for name in ("BEAM_SLURM_CLUSTER", "SBATCH_PARTITION", "SBATCH_ACCOUNT", "SBATCH_QOS", "SBATCH_TIMELIMIT",
                 "CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "OPTIMIZER_STATE_DISK_DIR"):
        env.pop(name, None)
    batch, low = slurm_sandbox.partition("batch"), slurm_sandbox.partition("low")
    paths = [f"paths.ckpt_path={home}/ckpts/run", f"paths.export_path={home}/exports/run"]
    done = beam(env, "doctor", "--probe", "--write", "lab", "recipe=lora_16gpu", f"cluster.partition={batch}",
                "trainer.backend=rehearsal", *paths)
    assert done.returncode == 0, done.stdout + done.stderr
    written = home / "config" / "cluster" / "lab.yaml"
    assert f"site profile written: {written}" in done.stdout
    profile = yaml.safe_load(written.read_text())
    assert profile["cluster"]["partition"] == batch
    measured = set(profile["site"]["measured"])
    assert {"cluster.storage_write_gbytes_per_s", "cluster.signal_before_s"} <= measured, profile
    assert profile["cluster"]["storage_write_gbytes_per_s"] > 0 and profile["site"]["requeue_hold_s"] > 0

    plan_args = ["plan", "--json", "recipe=lora_16gpu", "cluster=lab", "paths.model_path=/m", "paths.data_dir=/d",
                 "paths.skyrl_dir=/s", "cluster.check_paths_on_submit=false", *paths]
    done = beam(env, *plan_args)
    plan = json.loads(done.stdout)
    assert_json_valid("plan", plan)
    assert plan["profile"]["name"] == "lab" and plan["resources"]["partition"] == batch, done.stderr
    assert plan["resources"]["signal_before_s"] == profile["cluster"]["signal_before_s"]
    assert "cluster.signal_before_s" in plan["profile"]["measured"]
    rows = {row["item"]: row["text"] for row in plan["rows"]}
    assert f"{batch} (profile lab)" in rows["partition / account / qos"]
    assert "before (measured, profile lab)" in rows["time limit / notice"]
    assert plan["slurm"]["asked"] and plan["slurm"]["accepted"], plan["slurm"]

    done = beam(env, *plan_args, f"cluster.partition={low}", "cluster.signal_before_s=400")
    plan = json.loads(done.stdout)
    assert_json_valid("plan", plan)
    assert plan["resources"]["partition"] == low and plan["resources"]["signal_before_s"] == 400, done.stderr
    assert not {"cluster.partition", "cluster.signal_before_s"} & set(plan["profile"]["keys"])
    assert "cluster.signal_before_s" not in plan["profile"]["measured"]

    done = beam(env, "doctor", "--write", "lab", "recipe=lora_16gpu", f"cluster.partition={batch}", *paths)
    assert done.returncode == 2 and "--force" in done.stderr and yaml.safe_load(written.read_text()) == profile
