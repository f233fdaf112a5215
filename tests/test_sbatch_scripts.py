"""The batch scripts: headers right for their recipe, thin, one helper that finds the checkout, accepted by Slurm."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from beam_slurm import REPO_ROOT
from beam_slurm.config.load import load_config

SCRIPTS = {"train_lora_16gpu.sh": "lora_16gpu", "train_lora_32gpu.sh": "lora_32gpu",
           "train_bf16.sh": "bf16_64gpu", "train_mxfp8.sh": "mxfp8_64gpu"}
PATHS = ["paths.model_path=/m", "paths.data_dir=/d", "paths.skyrl_dir=/s"]
ALL_SCRIPTS = sorted(p.name for p in (REPO_ROOT / "sbatch").glob("*.sh"))
# What each script hands to the interpreter after finding the checkout (the checkout's own path included).
TARGETS = {**{s: f"{REPO_ROOT}/stages/train.py recipe={r}" for s, r in SCRIPTS.items()},
           "eval_aime.sh": f"{REPO_ROOT}/stages/evaluate.py", "prepare_data.sh": f"{REPO_ROOT}/stages/prepare_data.py",
           "pull_container.sh": f"{REPO_ROOT}/stages/pull_container.py"}


def headers(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"#SBATCH --([a-z-]+)(?:=(.*))?$", line)
        if match:
            found[match.group(1)] = match.group(2) or ""
    return found


@pytest.mark.parametrize("script,recipe", SCRIPTS.items())
def test_headers_match_the_recipe(script, recipe):
    path = REPO_ROOT / "sbatch" / script
    h = headers(path)
    cfg = load_config([f"recipe={recipe}", *PATHS])
    assert int(h["nodes"]) == cfg.cluster.nodes
    assert int(h["gpus-per-node"]) == cfg.cluster.gpus_per_node == 8
    assert h["ntasks-per-node"] == "1" and "exclusive" in h and "requeue" in h
    assert h["signal"] == f"B:USR1@{cfg.cluster.signal_before_s}"  # reaches the batch shell, where the handler runs
    assert h["open-mode"] == "append" and "%j" in h["output"]
    assert f"stages/train.py\" recipe={recipe} \"$@\"" in path.read_text()
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


@pytest.mark.sandbox
@pytest.mark.parametrize("script", ALL_SCRIPTS)
def test_slurm_accepts_the_scripts(slurm_sandbox, script):
    """`sbatch --test-only` checks the headers against a real controller without queueing anything."""
    # The sandbox is smaller than a real cluster: at most its node count, and its nodes' memory.
    small = ["--mem=500M"] if "mem" in headers(REPO_ROOT / "sbatch" / script) else []
    if int(headers(REPO_ROOT / "sbatch" / script)["nodes"]) > len(slurm_sandbox.nodes):
        small.append(f"--nodes={len(slurm_sandbox.nodes)}")
    out = subprocess.run(["sbatch", "--test-only", *small, str(REPO_ROOT / "sbatch" / script)], capture_output=True,
                         text=True, env=slurm_sandbox.env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "to start at" in out.stderr


@pytest.mark.sandbox
def test_a_script_refuses_a_bad_recipe_before_starting_ray(slurm_sandbox, tmp_path):
    """A bad override fails in the batch shell with the key named, exit 2, and no Ray step is started."""
    out_dir = slurm_sandbox.new_dir("bad-recipe")
    submitted = subprocess.run(
        # 10 minutes: with the script's --signal=B:USR1@300, a 5-minute job gets its notice at Slurm's first time check
        # after the start, which can kill the batch shell before it has printed the refusal.
        ["sbatch", "--parsable", "--time=00:10:00", f"--output={out_dir}/%j.out",
         str(REPO_ROOT / "sbatch" / "train_lora_16gpu.sh"), "megatron.tensor_parallel=3", "trainer.backend=rehearsal",
         f"paths.model_path={out_dir}", f"paths.data_dir={out_dir}", f"paths.ckpt_path={out_dir}/ck",
         f"paths.export_path={out_dir}/ex"],
        capture_output=True, text=True, env=slurm_sandbox.env(), timeout=60, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    slurm_sandbox.submitted.append(job)
    state = slurm_sandbox.wait(job, timeout=180)
    log = next(out_dir.glob("*.out")).read_text()
    assert state == "FAILED", log
    assert "megatron.tensor_parallel" in log and "nothing was submitted" in log
    steps = [r for r in slurm_sandbox.sacct(job) if "." in r["JobID"] and not r["JobID"].endswith(".batch")]
    assert steps == [], steps


def outside_slurm_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "BEAM_SLURM_HOME"}
    return {**env, **extra}


def recorder(tmp_path: Path) -> Path:
    """An interpreter stand-in (BEAM_PYTHON) that prints the checkout it was given and its arguments."""
    path = tmp_path / "record-python"
    path.write_text('#!/bin/sh\necho "home=$BEAM_SLURM_HOME"\necho "args=$*"\n')
    path.chmod(0o755)
    return path


def test_every_script_finds_the_checkout_through_the_one_helper():
    assert ALL_SCRIPTS == sorted([*SCRIPTS, "eval_aime.sh", "prepare_data.sh", "pull_container.sh"])
    assert subprocess.run(["bash", "-n", str(REPO_ROOT / "sbatch" / "lib" / "locate_checkout.sh")]).returncode == 0
    for name in ALL_SCRIPTS:
        text = (REPO_ROOT / "sbatch" / name).read_text()
        assert text.count("/sbatch/lib/locate_checkout.sh") == 1 and "beam_slurm/cli.py" not in text, name


@pytest.mark.parametrize("script", ALL_SCRIPTS)
def test_outside_slurm_the_script_runs_from_any_folder(script, tmp_path):
    """Run by its path in the checkout, with no Slurm variables at all (no `SLURM_JOB_ID: unbound variable`)."""
    out = subprocess.run(["bash", str(REPO_ROOT / "sbatch" / script), "x=1"], capture_output=True, text=True,
                         cwd=tmp_path, env=outside_slurm_env(BEAM_PYTHON=str(recorder(tmp_path))), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"home={REPO_ROOT}", f"args={TARGETS[script]} x=1"]


@pytest.mark.parametrize("script", ALL_SCRIPTS)
def test_a_copy_without_beam_slurm_home_exits_2_naming_it(script, tmp_path):
    copy = tmp_path / script
    shutil.copy(REPO_ROOT / "sbatch" / script, copy)
    out = subprocess.run(["bash", str(copy)], capture_output=True, text=True, cwd=tmp_path,
                         env=outside_slurm_env(BEAM_PYTHON=str(recorder(tmp_path))), timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert f"{script}: cannot find the beam-slurm checkout; set BEAM_SLURM_HOME=" in out.stderr
    assert "unbound variable" not in out.stderr


@pytest.mark.parametrize("script", ALL_SCRIPTS)
def test_a_copy_runs_when_beam_slurm_home_is_set(script, tmp_path):
    copy = tmp_path / script
    shutil.copy(REPO_ROOT / "sbatch" / script, copy)
    out = subprocess.run(["bash", str(copy), "y=2"], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env=outside_slurm_env(BEAM_SLURM_HOME=str(REPO_ROOT), BEAM_PYTHON=str(recorder(tmp_path))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"home={REPO_ROOT}", f"args={TARGETS[script]} y=2"]


def test_a_copy_runs_the_real_cli_of_the_checkout(tmp_path):
    """The checkout's own interpreter and CLI: a bad override is refused there with exit 2 (nothing starts)."""
    copy = tmp_path / "train.sh"
    shutil.copy(REPO_ROOT / "sbatch" / "train_lora_16gpu.sh", copy)
    out = subprocess.run(["bash", str(copy), *PATHS, "megatron.tensor_parallel=3"], capture_output=True, text=True,
                         cwd=tmp_path, env=outside_slurm_env(BEAM_SLURM_HOME=str(REPO_ROOT)), timeout=120)
    assert out.returncode == 2 and "megatron.tensor_parallel" in out.stderr, out.stderr


def test_a_wrong_beam_slurm_home_is_named(tmp_path):
    out = subprocess.run(["bash", str(REPO_ROOT / "sbatch" / "train_bf16.sh")], capture_output=True, text=True,
                         cwd=tmp_path, env=outside_slurm_env(BEAM_SLURM_HOME=str(tmp_path)), timeout=60)
    assert out.returncode == 2 and "set BEAM_SLURM_HOME" in out.stderr


@pytest.mark.sandbox
def test_a_spooled_copy_needs_beam_slurm_home(slurm_sandbox):
    """Slurm runs a spool copy; a copy submitted from outside the checkout fails with exit 2 naming BEAM_SLURM_HOME,
    and runs (here: the real CLI refusing a bad override, before Ray) once BEAM_SLURM_HOME is exported."""
    job_dir = slurm_sandbox.new_dir("script-copy")
    copy = job_dir / "train.sh"
    shutil.copy(REPO_ROOT / "sbatch" / "train_lora_16gpu.sh", copy)
    env = {k: v for k, v in slurm_sandbox.env().items() if k != "BEAM_SLURM_HOME"}
    args = [str(copy), *PATHS, "megatron.tensor_parallel=3", "trainer.backend=rehearsal"]
    logs = {}
    for label, extra in (("without", {}), ("with", {"BEAM_SLURM_HOME": str(REPO_ROOT)})):
        # 10 minutes, as above: a 5-minute job can get its USR1 notice before the shell has printed anything.
        submitted = subprocess.run(["sbatch", "--parsable", "--time=00:10:00", f"--output={job_dir}/{label}-%j.out",
                                    *args], capture_output=True, text=True, env={**env, **extra}, cwd=job_dir,
                                   timeout=60)
        assert submitted.returncode == 0, submitted.stderr
        job = submitted.stdout.strip().split(";")[0]
        slurm_sandbox.submitted.append(job)
        assert slurm_sandbox.wait(job, timeout=180) == "FAILED"
        logs[label] = next(job_dir.glob(f"{label}-*.out")).read_text()
        assert [r["ExitCode"] for r in slurm_sandbox.sacct(job) if r["JobID"] == job] == ["2:0"], logs[label]
    assert "cannot find the beam-slurm checkout; set BEAM_SLURM_HOME" in logs["without"]
    assert "megatron.tensor_parallel" in logs["with"] and "cannot find" not in logs["with"]
