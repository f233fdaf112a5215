"""The sandbox command itself: status, idempotent up, repair, run inside a node, clean down, clear errors."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "slurm_sandbox.py"


def load_tool():
    if "slurm_sandbox_tool" in sys.modules:
        return sys.modules["slurm_sandbox_tool"]
    spec = importlib.util.spec_from_file_location("slurm_sandbox_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["slurm_sandbox_tool"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


# Its sandbox tests stop, restart and repair the sandbox's own daemons and links: they run alone (tools/run_tests.sh).
pytestmark = pytest.mark.whole_cluster


def sandbox(*args: str, timeout: float = 180, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kwargs)


def test_missing_packages_are_named_by_their_debian_package(tmp_path):
    tool = load_tool()
    assert tool.missing_packages(search_path=str(tmp_path)) == sorted(set(tool.REQUIRED_PROGRAMS.values()))
    (tmp_path / "sbatch").write_text("#!/bin/sh\n")
    (tmp_path / "sbatch").chmod(0o755)
    assert "slurmctld" in tool.missing_packages(search_path=str(tmp_path))


def test_refuses_to_run_without_root_with_a_clear_message():
    if os.geteuid() == 0:
        # Drop to an unprivileged user for this one call. The checkout may live where that user cannot read
        # (/root/...), so the tool runs from a world-readable copy; the system Python, as the venv may sit there too.
        readable = Path(tempfile.mkdtemp(prefix="sandbox-tool-", dir="/var/tmp"))
        try:
            readable.chmod(0o755)
            copy = readable / TOOL.name
            shutil.copyfile(TOOL, copy)
            copy.chmod(0o644)
            proc = subprocess.run(["/usr/bin/python3", str(copy), "up"], capture_output=True, text=True,
                                  timeout=60, user="nobody", group="nogroup", extra_groups=[], cwd="/",
                                  stdin=subprocess.DEVNULL)
        finally:
            shutil.rmtree(readable, ignore_errors=True)
    else:
        proc = sandbox("up")
    assert proc.returncode == 2, proc
    assert "must run as root" in proc.stderr
    assert "Permission denied" not in proc.stderr  # the tool itself ran and refused, not the interpreter


@pytest.mark.sandbox
def test_status_and_up_are_idempotent(slurm_sandbox):
    status = sandbox("status")
    assert status.returncode == 0, status.stdout + status.stderr
    for node, ip in slurm_sandbox.node_ips.items():
        assert f"{node}" in status.stdout and ip in status.stdout
    assert "healthy" in status.stdout and "batch*" in status.stdout

    tool = load_tool()

    def daemon_pids() -> dict[str, int]:
        # The first process of each daemon; children (job steps) come and go with other tests' jobs.
        found: dict[str, int] = {}
        for pid, (state_dir, name) in sorted(tool.sandbox_daemons().items()):
            if state_dir == str(slurm_sandbox.state_dir):
                found.setdefault(name, pid)
        return found

    before = daemon_pids()
    again = sandbox("up")
    assert again.returncode == 0 and "already up" in again.stdout, again.stdout + again.stderr
    assert before and daemon_pids() == before, "an idempotent up restarts nothing"


@pytest.mark.sandbox
def test_run_executes_inside_the_node(slurm_sandbox):
    proc = sandbox("run", "--node", "n2", "--", "sh", "-c", "hostname; hostname -I; sinfo -h -n n2 -o %t")
    assert proc.returncode == 0, proc.stderr
    hostname, ips, state = proc.stdout.split("\n")[:3]
    assert hostname == "n2"
    fabric_ip = load_tool().make_nodes(2)[1].fabric_ip
    assert ips.split() == [slurm_sandbox.node_ips["n2"], fabric_ip], "eth0 on the Slurm network, then fab0"
    assert state in {"idle", "mix", "alloc"}


@pytest.mark.sandbox
def test_up_repairs_a_dead_node_daemon(slurm_sandbox):
    tool = load_tool()
    layout = tool.Layout(slurm_sandbox.state_dir)
    victim = slurm_sandbox.nodes[-1]
    pid = tool.daemon_pid(layout, f"slurmd-{victim}")
    assert pid
    os.kill(pid, signal.SIGKILL)
    tool.wait_until("slurmd to die", lambda: not tool.daemon_pid(layout, f"slurmd-{victim}"), 10)
    broken = sandbox("status")
    assert broken.returncode == 1 and f"slurmd-{victim}" in broken.stdout and "NOT RUNNING" in broken.stdout

    repaired = sandbox("up")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "already up" not in repaired.stdout
    assert sandbox("status").returncode == 0
    # The repaired node runs jobs again.
    job = slurm_sandbox.sbatch("#!/bin/bash\nhostname\n", f"--nodelist={victim}", "--mem=100", "--time=1",
                               f"--output={slurm_sandbox.new_dir('repair')}/out")
    assert slurm_sandbox.wait(job, 60) == "COMPLETED"


@pytest.mark.sandbox
@pytest.mark.skipif(not (os.environ.get("CI") or os.environ.get("BEAM_SANDBOX_CYCLE_TEST") == "1"),
                    reason="stops the shared sandbox (jobs of other test sessions on this machine would die); "
                           "runs in CI or with BEAM_SANDBOX_CYCLE_TEST=1")
def test_down_leaves_nothing_behind_and_up_restores(slurm_sandbox):
    tool = load_tool()
    down = sandbox("down")
    assert down.returncode == 0, down.stderr
    try:
        assert not [ns for ns in tool.netns_list() if ns.startswith(tool.NETNS_PREFIX)]
        assert not [link.name for link in Path("/sys/class/net").iterdir() if link.name.startswith("beamsb-")]
        assert tool.sandbox_daemons() == {}
        assert not (tool.SLURM_CONF_LINK.is_symlink()
                    and os.readlink(tool.SLURM_CONF_LINK) == str(slurm_sandbox.slurm_conf))
        assert sandbox("status").returncode == 1
        assert sandbox("down").returncode == 0, "down is idempotent"
    finally:
        up = sandbox("up")  # how fast: tools/bench_ray_bringup.py, not a timed test
    assert up.returncode == 0, up.stdout + up.stderr
    job = slurm_sandbox.sbatch("#!/bin/bash\ntrue\n", "--nodes=2", "--mem=100", "--time=1",
                               f"--output={slurm_sandbox.new_dir('cycle')}/out")
    assert slurm_sandbox.wait(job, 60) == "COMPLETED"


def _tcp_over(server_node: str, server_ip: str, client_node: str, port: int, timeout: float = 5.0) -> tuple[bool, str]:
    """Open one TCP connection from client_node to server_ip:port, with a listener in server_node; (worked, detail)."""
    listen = (f"import socket; s = socket.create_server(({server_ip!r}, {port})); s.settimeout({timeout}); "
              "c, a = s.accept(); print('accepted', a[0], flush=True)")
    server = subprocess.Popen([sys.executable, str(TOOL), "run", "--node", server_node, "--", "python3", "-c", listen],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        connect = (f"import socket, time\nfor _ in range(50):\n    try:\n"
                   f"        socket.create_connection(({server_ip!r}, {port}), timeout={timeout}).close(); break\n"
                   f"    except ConnectionRefusedError: time.sleep(0.1)\n")
        client = sandbox("run", "--node", client_node, "--", "python3", "-c", connect, timeout=60)
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return client.returncode == 0 and "accepted" in out, client.stderr + out + err


@pytest.mark.sandbox
def test_fabric_is_a_second_network_that_up_adds_and_repairs(slurm_sandbox):
    tool = load_tool()
    layout = tool.Layout(slurm_sandbox.state_dir)
    nodes = tool.make_nodes(len(slurm_sandbox.nodes))
    status = sandbox("status")
    for node in nodes:
        assert f"fabric {tool.FABRIC_INTERFACE} {node.fabric_ip}" in status.stdout, status.stdout
    first, second, victim = nodes[0], nodes[1], nodes[-1]
    # The fabric carries traffic between nodes, next to (not through) the Slurm network.
    route = sandbox("run", "--node", first.name, "--", "ip", "-o", "route", "get", second.fabric_ip)
    assert f"dev {tool.FABRIC_INTERFACE}" in route.stdout, route.stdout + route.stderr
    worked, detail = _tcp_over(second.name, second.fabric_ip, first.name, 29411)
    assert worked, detail

    daemons = {name: tool.daemon_pid(layout, name) for name in ("slurmctld", f"slurmd-{victim.name}")}
    run_command = tool.run_command
    run_command(["ip", "link", "del", victim.fabric_veth])  # the node's fabric link is gone (its fab0 with it)
    try:
        broken = sandbox("status")
        assert broken.returncode == 1 and f"fabric interface fab0 of {victim.name} missing" in broken.stdout
    finally:
        repaired = sandbox("up")
    assert repaired.returncode == 0 and "already up" not in repaired.stdout, repaired.stdout + repaired.stderr
    assert {name: tool.daemon_pid(layout, name) for name in daemons} == daemons, "repairing the fabric restarts nothing"
    assert tool.fabric_address(victim) == victim.fabric_ip and tool.fabric_link_state(victim) == "up"
    assert sandbox("status").returncode == 0
