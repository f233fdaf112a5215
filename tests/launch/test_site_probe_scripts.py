"""The probe jobs of `doctor --probe` (beam_slurm.launch.site_probe) without Slurm: their sbatch requests, and their
bash scripts run here as a node would run them (signals sent by the test)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.config.overrides import override
from beam_slurm.launch import site_probe

AWKWARD = "dir with space, 'quote' and $HOME"  # every value reaches the scripts shell-quoted


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "OPTIMIZER_STATE_DISK_DIR", "BEAM_SLURM_CLUSTER",
                "SBATCH_PARTITION", "SBATCH_QOS", "SBATCH_ACCOUNT"):
        monkeypatch.delenv(var, raising=False)


def recipe(tmp_path: Path, *extra: str):
    return load_config([override("paths.ckpt_path", f"{tmp_path}/ckpts/run"),
                        override("paths.export_path", f"{tmp_path}/exports/run"), *extra], validate=False)


def start(script: str, folder: Path, **env: str) -> subprocess.Popen:
    path = folder / "job.sh"
    path.write_text(script)
    return subprocess.Popen(["bash", str(path)], env={**os.environ, **env})


def wait_for_trap(process: subprocess.Popen, signum: int, timeout_s: float = 20) -> None:
    """Until bash has installed its handler for `signum` (SigCgt in /proc): a signal before that would kill it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = Path(f"/proc/{process.pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught & (1 << (signum - 1)):
            return
        time.sleep(0.05)
    raise AssertionError(f"bash never trapped signal {signum}")


def test_the_probe_jobs_ask_for_one_node_without_gpus_on_the_recipe_partition(tmp_path):
    cfg = recipe(tmp_path, "cluster.partition=gpu", "cluster.account=proj", "cluster.qos=high")
    folder = tmp_path / "probe"
    jobs = {job.kind: job for job in site_probe.probe_jobs(cfg, folder, write_mib=8, signal_asked_s=30)}
    assert list(jobs) == ["signal", "requeue", "storage"]
    for kind, job in jobs.items():
        argv = job.request.argv()
        assert "--nodes=1" in argv and "--partition=gpu" in argv and "--account=proj" in argv and "--qos=high" in argv
        assert not any(word.startswith(("--gpus", "--gres", "-G")) for word in argv), argv
        assert job.request.script == str(folder / f"{kind}.sh")
        assert f"--comment=beam-slurm:doctor-probe:{kind}:" in " ".join(argv)
    assert "--signal=B:USR1@30" in jobs["signal"].request.argv() and "--time=1" in jobs["signal"].request.argv()
    assert "--requeue" in jobs["requeue"].request.argv()
    assert len({job.request.token for job in jobs.values()}) == 3


def test_the_scripts_are_valid_bash_whatever_the_paths(tmp_path):
    folder = tmp_path / AWKWARD
    cfg = recipe(tmp_path / AWKWARD, override("paths.optimizer_state_disk_dir", str(tmp_path / AWKWARD / "nvme")))
    for job in site_probe.probe_jobs(cfg, folder, write_mib=8, signal_asked_s=30):
        checked = subprocess.run(["bash", "-n"], input=job.script_text, capture_output=True, text=True)
        assert checked.returncode == 0, (job.kind, checked.stderr)
        assert shlex.quote(str(job.result)) in job.script_text


def test_the_signal_script_records_when_usr1_arrived(tmp_path):
    result = tmp_path / AWKWARD / "signal.result"
    result.parent.mkdir()
    job = start(site_probe.signal_script(result, 30), tmp_path, SLURM_JOB_END_TIME="2000000000",
                SLURM_JOB_PARTITION="gpu")
    wait_for_trap(job, signal.SIGUSR1)
    sent = time.time()
    job.send_signal(signal.SIGUSR1)
    assert job.wait(timeout=20) == 0
    found = site_probe.read_pairs(result)
    assert found is not None and set(found) == {"start", "end", "partition", "usr1"}
    assert found["end"] == "2000000000" and found["partition"] == "gpu"
    assert sent - 1 <= float(found["usr1"]) <= time.time() and float(found["start"]) <= sent


def test_the_signal_script_records_the_kill_at_its_time_limit(tmp_path):
    result = tmp_path / "signal.result"
    job = start(site_probe.signal_script(result, 30), tmp_path)
    wait_for_trap(job, signal.SIGTERM)
    job.terminate()
    assert job.wait(timeout=20) == 0
    found = site_probe.read_pairs(result)
    assert found is not None and "term" in found and "usr1" not in found and found["end"] == ""


def test_the_requeue_script_runs_until_requeued_then_ends_at_once(tmp_path):
    starts = tmp_path / AWKWARD / "requeue.starts"
    starts.parent.mkdir()
    first = start(site_probe.requeue_script(starts), tmp_path)
    deadline = time.monotonic() + 20
    while 0 not in site_probe.read_starts(starts) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.poll() is None  # waits for the requeue
    first.kill()
    first.wait()
    again = start(site_probe.requeue_script(starts), tmp_path, SLURM_RESTART_COUNT="1")
    assert again.wait(timeout=20) == 0
    assert set(site_probe.read_starts(starts)) == {0, 1}


def test_the_storage_script_writes_both_storages_and_leaves_nothing(tmp_path):
    shared, local = tmp_path / AWKWARD / "ckpts", tmp_path / "node-tmp"
    local.mkdir()
    result = tmp_path / "storage.result"
    job = start(site_probe.storage_script(result, str(shared), None, write_mib=3), tmp_path, TMPDIR=str(local))
    assert job.wait(timeout=60) == 0
    found = site_probe.read_pairs(result)
    assert found is not None, "no result"
    block_bytes, blocks = site_probe.write_blocks(3)
    for key in ("shared", "local"):
        assert int(found[f"{key}_bytes"]) == block_bytes * blocks == 3 * 2**20, found
        assert float(found[f"{key}_end"]) > float(found[f"{key}_start"]), found
    assert found["local_dir"] == str(local)
    assert list(shared.iterdir()) == [] and list(local.iterdir()) == []  # written, removed; the block too


def test_the_storage_script_says_where_it_cannot_write(tmp_path):
    result = tmp_path / "storage.result"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    script = site_probe.storage_script(result, str(blocked / "ckpts"), str(tmp_path / "nvme"), write_mib=1)
    assert start(script, tmp_path, TMPDIR=str(tmp_path)).wait(timeout=60) == 0
    found = site_probe.read_pairs(result)
    assert found is not None and found["shared_error"].startswith(f"cannot write in {blocked / 'ckpts'}:")
    assert "local_bytes" in found and found["local_dir"] == str(tmp_path / "nvme")


@pytest.mark.parametrize("mib, block_bytes, blocks", [(256, 64 * 2**20, 4), (100, 64 * 2**20, 2), (3, 3 * 2**20, 1)])
def test_the_storage_job_writes_at_least_what_was_asked_in_whole_blocks(mib, block_bytes, blocks):
    assert site_probe.write_blocks(mib) == (block_bytes, blocks)
