"""The Slurm 24.11 sandbox (`tools/slurm_sandbox.py up --slurm-version 24.11`): its own client commands, its nodes,
partitions and QOS, a two-node job accounted by slurmdbd, and its independence from the 22.05 sandbox.

Skipped unless BEAM_SANDBOX_2411=1 (the root it runs from is an optional install part); skipped with the command
that builds the root where it is missing. Brings the 24.11 sandbox up (and down again if it was not up before); the
22.05 sandbox is never started or stopped here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_slurm_2411_tool import TOOL, load_tool

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.whole_cluster,
    pytest.mark.skipif(os.environ.get("BEAM_SANDBOX_2411") != "1",
                       reason="the Slurm 24.11 sandbox tests run with BEAM_SANDBOX_2411=1 (root built by "
                              "tools/install.sh 15-slurm-24.11-root)"),
]
VERSION = ["--slurm-version", "24.11"]


def sandbox(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def daemons(version: str) -> dict[int, tuple[str, str]]:
    """pid -> (state dir, daemon) of one version's sandbox daemons."""
    tool = load_tool()
    with tool.selected_version(version):
        return tool.sandbox_daemons()


def started_daemons(version: str) -> dict[int, tuple[str, str]]:
    """The daemons the tool started (the pids in their pid files), without the passing processes that carry their
    marker too: a slurmd's fork for one request, a job's slurmstepd."""
    tool = load_tool()
    return {pid: (state_dir, name) for pid, (state_dir, name) in daemons(version).items()
            if tool.daemon_pid(tool.Layout(Path(state_dir)), name) == pid}


class Cluster:
    def __init__(self, env_lines: str) -> None:
        self.env = dict(os.environ)
        for line in env_lines.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            self.env[name] = shlex.split(value)[0] if value else ""
        self.shared = Path(self.env["BEAM_SANDBOX_SHARED"])

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=timeout,
                              cwd=self.shared)

    def new_dir(self) -> Path:
        path = self.shared / "tests-2411" / uuid.uuid4().hex[:10]
        path.mkdir(parents=True)
        return path

    def wait(self, job_id: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self.run("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State").stdout.split()
            if states and states[0] in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}:
                return states[0]
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id}: {self.run('scontrol', 'show', 'job', job_id).stdout}")


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("the sandbox needs root")
    tool = load_tool()
    if not tool.host_is_debian_13() and tool.root_problem(tool.SLURM_2411_ROOT):
        pytest.skip(f"no Slurm 24.11 root at {tool.SLURM_2411_ROOT}: build it with "
                    f"`{tool.ROOT_BUILD_COMMAND}`")
    was_up = sandbox("status", *VERSION).returncode == 0
    up = sandbox("up", *VERSION)
    if up.returncode != 0:
        pytest.fail(f"the 24.11 sandbox did not come up:\n{up.stdout}\n{up.stderr}", pytrace=False)
    env = sandbox("env", *VERSION)
    assert env.returncode == 0, env.stderr
    yield Cluster(env.stdout)
    if not was_up:
        sandbox("down", *VERSION)


def test_its_client_commands_are_24_11(cluster):
    for program in ("sinfo", "sbatch", "scontrol", "sacct"):
        proc = cluster.run(program, "--version")
        assert proc.returncode == 0 and re.match(r"slurm(-wlm)? 24\.11\.", proc.stdout), (program, proc)
    assert "SLURM_VERSION           = 24.11" in cluster.run("scontrol", "show", "config").stdout


def test_nodes_partitions_and_qos(cluster):
    states = dict(line.split() for line in cluster.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.splitlines())
    assert states and set(states.values()) == {"idle"}, states
    partitions = cluster.run("sinfo", "-h", "-o", "%P").stdout.split()
    assert {"batch*", "low", "high", "short"} <= set(partitions)
    low = cluster.run("scontrol", "show", "partition", "low", "-o").stdout
    assert "PreemptMode=REQUEUE" in low and "GraceTime=20" in low
    config = cluster.run("scontrol", "show", "config").stdout
    assert re.search(r"PreemptParameters\s+= send_user_signal", config)
    assert "brief" in cluster.run("sacctmgr", "-n", "-P", "show", "qos", "format=name").stdout.split()
    gres = cluster.run("scontrol", "show", "node", "n1").stdout
    assert "Gres=gpu:8" in gres


def test_a_batch_job_runs_on_two_nodes_and_is_accounted(cluster):
    work = cluster.new_dir()
    script = work / "job.sh"
    python = Path(sys.executable)  # the venv's interpreter, bound into the root with what it links to
    script.write_text(f"#!/bin/bash\nsrun hostname\nsrun {python} -c 'import ssl, sqlite3, ctypes; print(\"py ok\")'\n"
                      "echo gpus=$CUDA_VISIBLE_DEVICES\n")
    proc = cluster.run("sbatch", "--parsable", "-N2", "--gres=gpu:2", "--mem=100", "--time=2",
                       f"--output={work}/out", str(script))
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    assert cluster.wait(job) == "COMPLETED", (work / "out").read_text()
    out = (work / "out").read_text().split()
    assert sorted(out[:2]) == ["n1", "n2"] and out.count("ok") == 2 and "gpus=0,1" in out
    row = cluster.run("sacct", "-X", "-n", "-P", "-j", job, "-o", "JobID,State,ExitCode,NodeList,AllocTRES").stdout
    assert row.startswith(f"{job}|COMPLETED|0:0|n[1-2]|") and "node=2" in row and "gres/gpu=4" in row, row
    shown = cluster.run("scontrol", "show", "job", job).stdout
    assert "ReqTRES=" in shown and "AllocTRES=" in shown and "\n   TRES=" not in shown, shown


def test_24_11_down_and_up_leave_the_22_05_sandbox_alone(cluster):
    tool = load_tool()
    before = started_daemons("22.05")
    old_links = sorted(link.name for link in Path("/sys/class/net").iterdir() if link.name.startswith("beamsb-"))
    down = sandbox("down", *VERSION)
    try:
        assert down.returncode == 0, down.stderr
        assert daemons("24.11") == {}
        assert not [link.name for link in Path("/sys/class/net").iterdir() if link.name.startswith("beamsb24-")]
        assert not tool.root_mounts(tool.SLURM_2411_ROOT)
        assert started_daemons("22.05") == before and sorted(
            link.name for link in Path("/sys/class/net").iterdir() if link.name.startswith("beamsb-")) == old_links
    finally:
        up = sandbox("up", *VERSION)
    assert up.returncode == 0, up.stdout + up.stderr
    assert started_daemons("22.05") == before, "the 24.11 up took nothing of 22.05's over"
    nodes = load_tool().configured_nodes(load_tool().Layout(Path(cluster.env["SLURM_CONF"]).parent.parent))
    assert cluster.run("sinfo", "-h", "-N", "-p", "batch", "-o", "%t").stdout.split() == ["idle"] * nodes


def test_run_enters_a_node_inside_the_root(cluster):
    proc = sandbox("run", *VERSION, "--node", "n2", "--", "sh", "-c", "hostname; hostname -I; cat /etc/debian_version")
    assert proc.returncode == 0, proc.stderr
    hostname, ips, debian = proc.stdout.split("\n")[:3]
    assert hostname == "n2" and ips.split() == ["10.79.0.12", "10.80.0.12"] and debian.startswith("13")


def test_the_jobs_end_time_variable_is_fixed_at_the_start_and_scontrol_follows_a_new_limit(cluster):
    """23.02+ puts SLURM_JOB_END_TIME in the job's environment. After `scontrol update TimeLimit` it still names the
    old end, while scontrol answers the new one: the attempt takes the time left from scontrol, the variable only
    when scontrol does not answer (policy.attempt.time_left_s)."""
    from beam_slurm.policy.attempt import time_left_s
    from beam_slurm.slurm.scheduler import parse_job

    work = cluster.new_dir()
    script = work / "job.sh"
    script.write_text(f"#!/bin/bash\necho $SLURM_JOB_END_TIME > {work}/end.tmp && mv {work}/end.tmp {work}/end\n"
                      "sleep 60\n")
    proc = cluster.run("sbatch", "--parsable", "-N1", "--mem=100", "--time=5", f"--output={work}/out", str(script))
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while not (work / "end").exists() and time.monotonic() < deadline:
            time.sleep(0.3)
        variable = (work / "end").read_text().strip()
        assert variable.isdigit(), (work / "out").read_text() if (work / "out").exists() else "no output"
        before = parse_job(cluster.run("scontrol", "show", "job", job).stdout)
        updated = cluster.run("scontrol", "update", f"JobId={job}", "TimeLimit=10")
        assert updated.returncode == 0, updated.stderr
        after = parse_job(cluster.run("scontrol", "show", "job", job).stdout)
        now = time.time()
        from_variable = time_left_s({}, job_end_time=variable, now=now)
        from_scontrol = time_left_s(after, job_end_time=variable, now=now)
        assert from_variable is not None and 4 * 60 - 30 < from_variable <= 5 * 60, from_variable
        assert from_scontrol is not None and 9 * 60 - 30 < from_scontrol <= 10 * 60, (from_scontrol, after)
        assert before["TimeLimit"] == "00:05:00" and after["TimeLimit"] == "00:10:00"
    finally:
        cluster.run("scancel", job)
