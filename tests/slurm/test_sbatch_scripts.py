"""The four training scripts: headers right for their recipe, thin, and accepted by a real Slurm."""

import re
import subprocess
from pathlib import Path

import pytest

from beam_slurm import REPO_ROOT
from beam_slurm.config import load_config

SCRIPTS = {"train_lora_16gpu.sh": "lora_16gpu", "train_lora_32gpu.sh": "lora_32gpu",
           "train_bf16.sh": "bf16_64gpu", "train_mxfp8.sh": "mxfp8_64gpu"}
PATHS = ["paths.model_path=/m", "paths.data_dir=/d", "paths.skyrl_dir=/s"]


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
    assert f"train recipe={recipe} \"$@\"" in path.read_text()
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


@pytest.mark.sandbox
@pytest.mark.parametrize("script", ["train_lora_16gpu.sh", "train_lora_32gpu.sh"])
def test_slurm_accepts_the_scripts(slurm_sandbox, script):
    """`sbatch --test-only` checks the headers against a real controller without queueing anything."""
    out = subprocess.run(["sbatch", "--test-only", str(REPO_ROOT / "sbatch" / script)], capture_output=True, text=True,
                         env=slurm_sandbox.env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "to start at" in out.stderr


@pytest.mark.sandbox
def test_a_script_refuses_a_bad_recipe_before_starting_ray(slurm_sandbox, tmp_path):
    """A bad override fails in the batch shell with the key named, exit 2, and no Ray step is started."""
    out_dir = slurm_sandbox.new_dir("bad-recipe")
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--time=00:05:00", f"--output={out_dir}/%j.out",
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
