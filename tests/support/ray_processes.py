"""Find one job's Ray processes on the sandbox: its nodes share this machine's process table, each has its own /tmp,
and every Ray process carries its task's SLURM_* variables. Plain module (not conftest) so any test imports it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = Path(sys.executable).with_name("ray")


def raylet_pids(job_id: str, *, attempt: int | str | None = None, node: str | None = None, not_on: str | None = None,
                rank: int | None = None) -> list[int]:
    """Raylets of this job (of one attempt when given: 0, or '0.1' for an in-job restart), on `node`, not on `not_on`,
    or of the node of Ray rank `rank` (BEAM_RAY_RANK: each node is its own step)."""
    # The job's folder is /tmp/ray-<job>-<attempt>-<random> (beam_slurm.jobs.ray_cluster.local_ray).
    temp_dir = f"/tmp/ray-{job_id}-{'' if attempt is None else f'{attempt}-'}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"/raylet/raylet" not in cmdline or temp_dir not in cmdline:
            continue
        if node is not None and f"SLURMD_NODENAME={node}".encode() not in environ:
            continue
        if not_on is not None and f"SLURMD_NODENAME={not_on}".encode() in environ:
            continue
        if rank is not None and f"BEAM_RAY_RANK={rank}".encode() not in environ:
            continue
        found.append(int(entry))
    return found


def one_raylet(job_id: str, **where) -> int | None:
    """The first raylet `raylet_pids` finds, or None."""
    pids = raylet_pids(job_id, **where)
    return pids[0] if pids else None


def ray_processes(job_id: str) -> list[str]:
    """Processes (not zombies) still running from any of this job's Ray temp dirs (/tmp/ray-<job>-<attempt>), on any
    node: "<pid>: <command line>"."""
    marker = f"/ray-{job_id}-".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(f"{entry}: {cmdline[:120].decode(errors='replace')}")
    return found


def ray_left_running(job_id: str, settle_s: float = 15) -> list[str]:
    """`ray_processes` after giving the job's teardown up to settle_s seconds."""
    deadline = time.monotonic() + settle_s
    while ray_processes(job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    return ray_processes(job_id)



def _processes():
    """(pid, environ entries, command line with spaces, state letter) of every process still readable."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        yield int(entry), environ, cmdline, state


def job_processes(job_id: str) -> list[str]:
    """Processes (not zombies) on any node whose environment names this job (SLURM_JOB_ID): the batch shell, every
    step's tasks, Ray's daemons and workers (a worker's command line is its title, 'ray::...', without a temp dir)."""
    wanted = f"SLURM_JOB_ID={job_id}".encode()
    return [f"{pid} ({state}): {cmdline[:120].decode(errors='replace')}" for pid, environ, cmdline, state
            in _processes() if wanted in environ and state != "Z" and pid != os.getpid()]


def actor_pids(job_id: str, title: str, node: str | None = None) -> list[int]:
    """Ray worker processes of this job whose title starts with `title` ('ray::GpuSlot'), on `node` when given."""
    return sorted(pid for pid, environ, cmdline, _ in _processes()
                  if cmdline.startswith(title.encode()) and f"SLURM_JOB_ID={job_id}".encode() in environ
                  and (node is None or f"SLURMD_NODENAME={node}".encode() in environ))


@contextlib.contextmanager
def private_ray_head(*start_args: str, env: dict[str, str] | None = None, prefix: str = "/tmp/rh"):
    """A Ray head of the test's own (`ray start --head --block` in its own session), yielding (address, temp dir);
    torn down by killing that session only, never with `ray stop`, which would stop every Ray on the machine."""
    temp = Path(tempfile.mkdtemp(prefix=prefix))  # short: Ray's unix sockets live under it
    log = temp / "start.log"
    with open(log, "w") as out:
        head = subprocess.Popen([str(RAY), "start", "--head", "--block", "--port=0", f"--temp-dir={temp}",
                                 "--disable-usage-stats", *start_args], stdout=out, stderr=subprocess.STDOUT,
                                # No drain on SIGTERM: `--block` would otherwise wait up to 30 s at teardown.
                                env={**os.environ, "RAY_ADDRESS": "", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
                                     **(env or {})}, start_new_session=True)
    try:
        deadline, address = time.time() + 180, None
        while address is None and time.time() < deadline and head.poll() is None:
            address = next((line.split("--address=")[1].strip().strip("'").split("'")[0]
                            for line in log.read_text().splitlines() if "--address=" in line), None)
            time.sleep(0.5)
        assert address, f"ray head did not come up: {log.read_text()[-2000:]}"
        yield address, temp
    finally:
        try:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
