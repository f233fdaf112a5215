"""On the Slurm sandbox (real sbatch/srun, nodes with their own hostnames and /tmp): the pull stage's batch script
racing from several jobs, a killed holder on one node taken over from another, and runtime `none` run through srun.
The image import itself is the test double tests/support/test_doubles/fake_image_import (no runtime here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from beam_slurm.config.container import ContainerSettings, same_path_mounts
from beam_slurm.config.container_runtime import (
    cached_image_path,
    command_prefix,
    digest_record_path,
    srun_container_args,
)

pytestmark = pytest.mark.sandbox

HERE = Path(__file__).parent
REPO = HERE.parents[1]
FAKE_IMPORT = HERE.parent / "support" / "test_doubles" / "fake_image_import"
IMAGE = "ghcr.io/example/skyrl:beam-release"
# The header asks for a real pull node's resources; the sandbox nodes are small, and sbatch options override headers.
SMALL = ["--cpus-per-task=1", "--mem=200M", "--time=00:05:00"]


@pytest.fixture
def pull_setup(slurm_sandbox):
    work = slurm_sandbox.new_dir("pull")
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "enroot").symlink_to(FAKE_IMPORT)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_RUNTIME_LOG": str(work / "runtime.log"),
           "BEAM_CONTAINER_IMAGE": IMAGE, "BEAM_CONTAINER_CACHE_DIR": str(work / "cache"),
           "BEAM_CONTAINER_RUNTIME": "pyxis"}
    # Make the script find the checkout by itself (Slurm runs a spool copy of it).
    os.environ.pop("BEAM_SLURM_HOME", None)
    return work, env


def submit_pull(sandbox, work: Path, env: dict, *script_args: str, sleep: str = "3", node: str = "") -> str:
    """sbatch the real batch script with arguments after it; BEAM_SLURM_HOME empty so it locates the checkout."""
    where = [f"--nodelist={node}"] if node else []
    proc = subprocess.run(["sbatch", "--parsable", *SMALL, *where, f"--chdir={work}", str(REPO / "sbatch" / "pull_container.sh"),
                           *script_args], env=sandbox.env({**env, "FAKE_RUNTIME_SLEEP": sleep, "BEAM_SLURM_HOME": ""}),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def starts(work: Path) -> list[str]:
    log = work / "runtime.log"
    return [line for line in log.read_text().splitlines() if line.startswith("start ")] if log.exists() else []


def image_path(work: Path) -> Path:
    return cached_image_path(ContainerSettings(runtime="pyxis", image=IMAGE, image_cache_dir=str(work / "cache")))


def job_output(work: Path, job_id: str) -> str:
    return (work / f"beam-pull-container-{job_id}.out").read_text()


def test_three_pull_jobs_race_and_one_imports(slurm_sandbox, pull_setup):
    work, env = pull_setup
    nodes = slurm_sandbox.nodes[-2:]  # two different hosts: the lock must work across nodes, not just processes
    jobs = [submit_pull(slurm_sandbox, work, env, node=nodes[i % 2]) for i in range(3)]
    states = [slurm_sandbox.wait(job, timeout=120) for job in jobs]
    outputs = {job: job_output(work, job) for job in jobs}
    assert states == ["COMPLETED"] * 3, outputs
    assert len(starts(work)) == 1, starts(work)
    image = image_path(work)
    assert image.read_text().startswith("partial;image docker://ghcr.io#example/skyrl:beam-release")
    assert json.loads(digest_record_path(image).read_text())["image"] == IMAGE
    assert all(out.strip().splitlines()[-1] == str(image) for out in outputs.values()), outputs


def test_holder_killed_on_one_node_is_taken_over_from_another(slurm_sandbox, pull_setup):
    work, env = pull_setup
    holder_node, next_node = slurm_sandbox.nodes[-2:]
    holder = submit_pull(slurm_sandbox, work, env, "container.lock_stale_after_s=4", sleep="300", node=holder_node)
    deadline = time.monotonic() + 90
    while not starts(work) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert starts(work), f"holder never started importing: {slurm_sandbox.scontrol_job(holder)}"
    subprocess.run(["scancel", "--signal=KILL", "--full", holder], env=slurm_sandbox.env(), check=True, timeout=60)
    slurm_sandbox.wait(holder, timeout=60)
    lock_file = image_path(work).with_name(image_path(work).name + ".lock")
    assert lock_file.exists()

    # Another host cannot see the holder's processes: it takes over once the heartbeat has stopped for 4 s.
    nxt = submit_pull(slurm_sandbox, work, env, "container.lock_stale_after_s=4", sleep="0", node=next_node)
    assert slurm_sandbox.wait(nxt, timeout=120) == "COMPLETED", job_output(work, nxt)
    out = job_output(work, nxt)
    assert "taking over, no heartbeat from" in out and f"on {holder_node}" in out, out
    assert len(starts(work)) == 2
    assert image_path(work).is_file() and digest_record_path(image_path(work)).is_file() and not lock_file.exists()


def test_runtime_none_runs_the_command_unchanged_on_two_nodes(slurm_sandbox):
    settings = ContainerSettings(runtime="none")
    mounts = same_path_mounts(read_only=[str(REPO)])
    tricky = ["a b", "$HOME", "'q'", '"dq"', "`id`", "*"]
    argv = ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=100M",
            *srun_container_args(settings, mounts, container_name="x"), *command_prefix(settings, mounts),
            sys.executable, "-c", "import json, socket, sys; print(json.dumps([socket.gethostname(), sys.argv[1:]]))",
            *tricky]
    proc = subprocess.run(argv, env=slurm_sandbox.env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len({host for host, _ in rows}) == 2 and all(args == tricky for _, args in rows)
