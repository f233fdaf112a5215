"""Ray across a real Slurm allocation (the sandbox): bring-up with token auth, two jobs sharing nodes, the preflight
and the GPU-visibility check. The trainer is tests/jobs/ray_cluster/driver_double.py (a test double: the real trainer needs
GPUs). A worker's Ray dying mid-run, the notice -> save -> requeue -> resume sequence and a preemption by the `high`
partition are run with the real batch script and the rehearsal trainer in tests/jobs/training/test_train_sandbox.py."""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from ray_processes import ray_left_running

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[3]
PYTHON = sys.executable
DOUBLE = Path(__file__).with_name("driver_double.py")
WHOLE_NODES = "--nodes=2 --ntasks-per-node=1 --gpus-per-node=8 --exclusive --requeue --time=10"


def job_keys(work: Path) -> str:
    """Recipe keys every job here sets: the paths preflight reads, the log folder and the export path (the run
    record, with the run's bad nodes, is the test's own: the default, ~/exports/<run name>, would be every test's and
    outlive the sandbox). The recipe's trainer is replaced by the driver double, so the rehearsal backend stands for
    it (no SkyRL checkout needed)."""
    return (f"recipe=lora_16gpu trainer.backend=rehearsal paths.model_path={work} paths.data_dir={work} "
            f"paths.log_dir={work}/logs paths.export_path={work}/export")


def train_script(work: Path, sbatch_options: str, driver_args: str, train_options: str = "") -> str:
    return f"""#!/bin/bash
#SBATCH {sbatch_options}
#SBATCH --output={work}/slurm-%j.out --open-mode=append
export CKPT_PATH={work}/ckpt BEAM_SLURM_STATE_DIR={work}/state
exec {PYTHON} -m beam_slurm.jobs.training.train_job {job_keys(work)} {train_options} -- {PYTHON} {DOUBLE} {driver_args}
"""


def output(work: Path, job_id: str) -> str:
    path = work / f"slurm-{job_id}.out"
    return path.read_text() if path.exists() else ""


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_two_nodes_sixteen_gpus_with_token_auth(slurm_sandbox):
    work = slurm_sandbox.new_dir("ray-auth")
    job = slurm_sandbox.sbatch(train_script(
        work, WHOLE_NODES,
        f"2 0.2 --expect-gpus 16 --expect-nodes 2 --check-unauthenticated --copy-token {work}/token-copy"))
    state = slurm_sandbox.wait(job, timeout=300)
    out = output(work, job)
    assert state == "COMPLETED", out
    assert "DRIVER cluster GPUs=16 nodes=2" in out and "auth=token" in out, out
    assert "unauthenticated client: refused" in out, out
    assert "all 2 nodes and 16 GPUs registered" in out
    token = (work / "token-copy").read_text().strip()
    assert len(token) == 64
    logs = [out] + [p.read_text(errors="replace") for p in (work / "logs").rglob("*") if p.is_file()]
    assert not any(token in text for text in logs), "the token must never reach a log"
    assert not (work / "state" / "jobs" / job).exists(), "the job's token folder is removed when the job ends"
    assert_no_ray_left(job)


def test_two_jobs_share_the_same_nodes_without_collisions(slurm_sandbox):
    work = slurm_sandbox.new_dir("ray-share")
    (work / "side").mkdir()
    first, second = slurm_sandbox.nodes[:2]
    half = f"--nodes=2 --nodelist={first},{second} --ntasks-per-node=1 --gpus-per-node=4 --cpus-per-task=4 --mem=1000 --time=10"
    jobs = []
    for name in ("a", "b"):
        job_work = work / name
        job_work.mkdir()
        jobs.append((job_work, slurm_sandbox.sbatch(train_script(
            job_work, half, f"1 0.1 --expect-gpus 8 --expect-nodes 2 --rendezvous {work}/side 2",
            "--no-preflight megatron.expert_parallel=4 rollout.tensor_parallel=4 rollout.pipeline_parallel=1"))))
    for job_work, job in jobs:
        assert slurm_sandbox.wait(job, timeout=400) == "COMPLETED", output(job_work, job)
        assert "DRIVER ran side by side with the other job" in output(job_work, job)
    addresses = {path.read_text() for path in (work / "side").iterdir()}
    assert len(addresses) == 2, f"both jobs' heads at distinct GCS ports: {addresses}"
    for job_work, job in jobs:
        nodes = next(r for r in slurm_sandbox.sacct(job) if r["JobID"] == job)["NodeList"]
        assert nodes == f"n[{first[1:]}-{second[1:]}]", nodes
        assert f"temp dir /tmp/ray-{job}-0" in output(job_work, job)
        assert_no_ray_left(job)


def assert_no_ray_left(job: str) -> None:
    left = ray_left_running(job)
    assert not left, f"Ray of job {job} left running: {left}"


def test_preflight_names_the_node_missing_a_path_and_ray_never_starts(slurm_sandbox):
    work = slurm_sandbox.new_dir("ray-preflight")
    # /tmp is private to each sandbox node: the file exists on the first node only.
    script = f"""#!/bin/bash
#SBATCH {WHOLE_NODES}
#SBATCH --output={work}/slurm-%j.out
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
srun --nodes=1 --ntasks=1 -w "$first" touch /tmp/beam-model-$SLURM_JOB_ID
export CKPT_PATH={work}/ckpt BEAM_SLURM_STATE_DIR={work}/state
exec {PYTHON} -m beam_slurm.jobs.training.train_job {job_keys(work)} paths.model_path=/tmp/beam-model-$SLURM_JOB_ID \\
    cluster.max_requeues=0 -- {PYTHON} {DOUBLE} 1 0.1
"""
    # No requeue allowed: this attempt's verdict (a requeue without the named node is the operator tests' case).
    job = slurm_sandbox.sbatch(script)
    assert slurm_sandbox.wait(job, timeout=240) == "FAILED"
    out = output(work, job)
    allocated = re.search(r"2 nodes \((\w+),(\w+)\)", out)
    assert allocated, out
    second = allocated.group(2)
    assert f"preflight FAILED on {second}: /tmp/beam-model-{job} does not exist here" in out, out
    assert out.count("preflight FAILED") == 1, out
    assert "starting the Ray step" not in out
    assert next(r for r in slurm_sandbox.sacct(job) if r["JobID"] == job)["ExitCode"] == "3:0"


def test_gpu_visibility_mismatch_fails_with_the_node_and_no_requeue(slurm_sandbox):
    """SkyRL issue 1577: Ray workers that keep every GPU visible would all use GPU 0; bring-up refuses."""
    work = slurm_sandbox.new_dir("ray-gpus")
    script = train_script(work, WHOLE_NODES, "1 0.1", "--no-preflight cluster.max_requeues=2 "
                          "+ray.extra_env.RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1")
    job = slurm_sandbox.sbatch(script)
    assert slurm_sandbox.wait(job, timeout=240) == "FAILED"
    out = output(work, job)
    assert "FAILED (setup): node n" in out and "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES is set" in out, out
    assert "starting the driver" not in out and "requeued" not in out, out
    assert_no_ray_left(job)
