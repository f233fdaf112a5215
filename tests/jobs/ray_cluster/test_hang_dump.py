"""The hang dump's actor list (`ray list actors`, written on the head's node) against a real Ray head with token
authentication and the dashboard that serves Ray's state API, and what it says when the dashboard is off."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from local_ports import free_port
from ray_processes import private_ray_head

from beam_slurm.config.job_spec import JobSpec
from beam_slurm.config.ray import RaySettings
from beam_slurm.core.atomic_files import write_json
from beam_slurm.core.ray_records import HEAD_FILE
from beam_slurm.jobs.ray_cluster.hang_dump import dump_node


@pytest.fixture
def authenticated_head():
    """A private Ray head with the dashboard and token authentication; (address, token file)."""
    token = Path(tempfile.mkdtemp(prefix="/tmp/rt")) / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    with private_ray_head("--num-cpus=1", "--include-dashboard=true", f"--dashboard-port={free_port()}",
                          env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}) as (address, _):
        yield address, token
    shutil.rmtree(token.parent, ignore_errors=True)


def attempt_with_head(tmp_path: Path, host: str, address: str, token: Path | None, dashboard: bool) -> Path:
    attempt = tmp_path / "attempt"
    attempt.mkdir(parents=True)
    write_json(attempt / HEAD_FILE, {"host": host, "address": address, "token_path": str(token) if token else None})
    JobSpec(ray=RaySettings(include_dashboard=dashboard)).write(attempt)
    return attempt / "hang"


def test_the_head_node_saves_the_list_of_actors_of_the_hung_cluster(authenticated_head, tmp_path):
    address, token = authenticated_head
    driver = ("import ray\nray.init()\n@ray.remote\nclass GpuSlot:\n    def ping(self): return 1\n"
              "slot = GpuSlot.options(name='slot0', lifetime='detached').remote()\nray.get(slot.ping.remote())\n")
    env = {**os.environ, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    made = subprocess.run([sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=180)
    assert made.returncode == 0, made.stderr[-3000:]
    folder = attempt_with_head(tmp_path, socket.gethostname(), address, token, dashboard=True)
    dump_node(folder, job_id="no-such-job", step_id="0")
    listed = (folder / socket.gethostname() / "ray_actors.txt").read_text()
    assert "class_name: GpuSlot" in listed and "state: ALIVE" in listed and "pid:" in listed, listed


def test_other_nodes_write_no_list_and_without_the_dashboard_the_head_says_why(tmp_path):
    folder = attempt_with_head(tmp_path, "another-node", "10.0.0.1:6379", None, dashboard=True)
    dump_node(folder, job_id="no-such-job", step_id="0")
    assert not (folder / socket.gethostname() / "ray_actors.txt").exists()
    assert (folder / socket.gethostname() / "processes.json").exists()
    folder = attempt_with_head(tmp_path / "off", socket.gethostname(), "10.0.0.1:6379", None, dashboard=False)
    dump_node(folder, job_id="no-such-job", step_id="0")
    said = (folder / socket.gethostname() / "ray_actors.txt").read_text()
    assert "ray.include_dashboard=false" in said, said
