#!/usr/bin/env python3
"""A real multi-node Slurm cluster on this one machine, for tests and for trying the batch scripts.

    tools/slurm_sandbox.py up [--nodes N]   start (or repair) the cluster; idempotent
    tools/slurm_sandbox.py status           daemons, nodes, sinfo; exit 0 when healthy, 1 otherwise
    tools/slurm_sandbox.py down [--purge]   stop every daemon, remove namespaces and bridge; idempotent
    tools/slurm_sandbox.py env              print `export SLURM_CONF=...` for a shell
    tools/slurm_sandbox.py run [--node n1] -- CMD...   run CMD inside a node (its network, hostname, /tmp)
    every verb takes --slurm-version 22.05 (the default: this machine's own Slurm) or 24.11 (see below)

What it gives: munge, MariaDB + slurmdbd (so `sacct` works), slurmctld (hostname `ctl`, 10.77.0.1) and N slurmd
nodes n1..nN, each in its own network namespace on a private bridge (10.77.0.11, .12, ...), with its own hostname,
its own /tmp, a second interface `fab0` on a second bridge used as the fabric (10.78.0.11, .12, ...; Slurm never uses
it, so a test can break one node's fabric link with `ip link set beamsb-f<i> down` while the node stays in service), 8 fake GPUs (GRES gpu backed by /dev/null) and CPUs=8 RealMemory=8000. Partitions: `batch` (default,
never preempted), `low` (preemptable: PreemptMode=REQUEUE, GraceTime=20) and `high` (preempts `low`), plus `short`
(limits) and `nonotice` (preempted without a notice), in which no test job runs; from 8
nodes on, every 4 nodes are also a lane with the same three partitions of its own (`lane1-batch`, `lane1-low`,
`lane1-high` on n1-n4, ...), the default partition of sbatch/salloc run with BEAM_SANDBOX_LANE=<k>. Requeued
jobs may restart about 11 s later (cred_expire=10). Everything lives under one state dir (default
/var/tmp/beam-slurm-sandbox, env BEAM_SANDBOX_DIR); its `shared/` dir, like the rest of the filesystem except
/tmp, is seen by every node. Run as root; standard library only.

Scale: `up --nodes 8` or `--nodes 16` (up to 64) renders the same per-node settings; the sandbox itself is light
(one slurmd is ~7 MB, the controller, slurmdbd and MariaDB ~150 MB together), what limits the node count here is
what jobs run on the nodes: a Ray node (raylet, GCS on the head, agents, a few workers) took ~0.8 GB on this machine,
so a 16-node Ray job needs ~13 GB (less with a small object store and no dashboard:
`ray.object_store_memory_bytes=100000000 ray.include_dashboard=false`), and every node's processes share the
machine's cores, so bring-up time grows with the node count where a real cluster's would not. One sandbox per
machine: namespaces, bridges, addresses and ports are machine-wide, so `up` from a second state dir takes the first
sandbox over (stops it); change the node count of the one sandbox only when no one else is using it.

Slurm 24.11 (`--slurm-version 24.11`): the same cluster on Slurm 24.11, beside the 22.05 one (both may be up at
once): its own state dir (/var/tmp/beam-slurm-sandbox-24.11, env BEAM_SANDBOX_2411_DIR), names (`beamsb24-`), subnets
(10.79.0.0/24, fabric 10.80.0.0/24), ports and daemon marker, so neither version's `up`/`down` touches the other's.
On Debian 12 its programs come from a Debian 13 root file system (built once by `tools/install.sh
15-slurm-24.11-root`, shared by every checkout): daemons and jobs run inside it (chroot), the client commands are
wrapper scripts in <state dir>/bin that run the real ones there (`env --slurm-version 24.11` puts them first on
PATH; they need root). What jobs touch is bind-mounted into the root at the same paths: /tmp, /var/tmp, /root, the
checkout, its venvs and their interpreters, the state dir, and the colon-separated paths of BEAM_SANDBOX_BIND.
On a Debian 13 host the host's own Slurm (24.11) is used and no root is needed (not tried yet).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import fcntl
import hashlib
import ipaddress
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_STATE_DIR = "/var/tmp/beam-slurm-sandbox"
# Fixed names so that a sandbox left behind by any other checkout is found and taken over.
NETNS_PREFIX = "beamsb-"
BRIDGE = "beamsb-br0"
VETH_PREFIX = "beamsb-v"
# The fabric: a second network between the nodes only (no controller, no default route), what NCCL/gloo would use.
FABRIC_BRIDGE = "beamsb-br1"
FABRIC_VETH_PREFIX = "beamsb-f"
FABRIC_INTERFACE = "fab0"
FABRIC_SUBNET = ipaddress.ip_network("10.78.0.0/24")
SUBNET = ipaddress.ip_network("10.77.0.0/24")
CONTROLLER_IP = "10.77.0.1"
CONTROLLER_HOSTNAME = "ctl"
NODES_PER_LANE = 4
FIRST_NODE_HOST_OCTET = 11
CLUSTER_NAME = "sandbox"
# Ports away from Slurm's and MariaDB's defaults so a real installation on the machine is not disturbed.
SLURMCTLD_PORT = 16817
SLURMD_PORT = 6818  # each node has its own network namespace, so the default port never clashes
SLURMDBD_PORT = 16819
MARIADB_PORT = 16820
GPUS_PER_NODE = 8
CPUS_PER_NODE = 8
MEMORY_MB_PER_NODE = 8000
# Every daemon carries this variable, so a sandbox started from any state dir can be found in /proc.
DAEMON_MARKER = "BEAM_SANDBOX_DAEMON"
DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_SLURM_DIR = Path("/etc/slurm")  # where plain `sbatch` (no SLURM_CONF) looks: the sandbox links its files there
SLURM_CONF_LINK = SYSTEM_SLURM_DIR / "slurm.conf"
# Every file Slurm reads from the folder of slurm.conf; the sandbox writes each (`slurm_file_texts`), links each.
SLURM_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "cli_filter.lua", "slurmdbd.conf")
PRIVATE_FILES = {"slurmdbd.conf"}  # the database password: readable by root only
GENERATED_HEADER = "# Generated by tools/slurm_sandbox.py"
LOCK_NAME = "beam-slurm-sandbox.lock"
SLURM_VERSION = "22.05"
"""The Slurm version of the cluster this process manages (select_version); the names above are that version's."""
SLURM_ROOT: Path | None = None
"""The Debian 13 root file system whose Slurm the 24.11 cluster runs (chroot), or None: this machine's own Slurm."""

# Program -> Debian package that provides it, for a clear message when something is missing.
REQUIRED_PROGRAMS = {
    "munged": "munge", "munge": "munge",
    "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-client",
    "slurmdbd": "slurmdbd", "slurmctld": "slurmctld", "slurmd": "slurmd", "slurmstepd": "slurmd",
    "sbatch": "slurm-client", "sinfo": "slurm-client", "scontrol": "slurm-client", "sacctmgr": "slurm-client",
    "ip": "iproute2", "unshare": "util-linux", "nsenter": "util-linux", "hostname": "hostname",
}


class SandboxError(RuntimeError):
    """A failure with a message meant for the user (printed without a traceback)."""


@dataclasses.dataclass(frozen=True)
class SlurmVersion:
    """Everything machine-wide that differs between the clusters of two Slurm versions, so both can be up at once."""

    name: str
    default_state_dir: str
    state_dir_env: str
    netns_prefix: str
    bridge: str
    veth_prefix: str
    fabric_bridge: str
    fabric_veth_prefix: str
    subnet: str
    fabric_subnet: str
    slurmctld_port: int
    slurmdbd_port: int
    mariadb_port: int
    daemon_marker: str
    """The environment variable naming a daemon's owner. A variable of its own (not only another value), because the
    22.05 code of every other checkout stops whatever carries BEAM_SANDBOX_DAEMON when it takes a sandbox over."""
    lock_name: str

    @property
    def controller_ip(self) -> str:
        return str(ipaddress.ip_network(self.subnet).network_address + 1)


SLURM_VERSIONS = {
    "22.05": SlurmVersion("22.05", DEFAULT_STATE_DIR, "BEAM_SANDBOX_DIR", NETNS_PREFIX, BRIDGE, VETH_PREFIX,
                          FABRIC_BRIDGE, FABRIC_VETH_PREFIX, str(SUBNET), str(FABRIC_SUBNET), SLURMCTLD_PORT,
                          SLURMDBD_PORT, MARIADB_PORT, DAEMON_MARKER, LOCK_NAME),
    # Interface names stay within Linux's 15 characters: beamsb24-br0, beamsb24-v64, beamsb24-f64.
    "24.11": SlurmVersion("24.11", "/var/tmp/beam-slurm-sandbox-24.11", "BEAM_SANDBOX_2411_DIR", "beamsb24-",
                          "beamsb24-br0", "beamsb24-v", "beamsb24-br1", "beamsb24-f", "10.79.0.0/24", "10.80.0.0/24",
                          16917, 16919, 16920, "BEAM_SANDBOX_2411_DAEMON", "beam-slurm-sandbox-24.11.lock"),
}
DEFAULT_SLURM_VERSION = "22.05"
SLURM_2411_ROOT = Path(os.environ.get("BEAM_SLURM_2411_ROOT", "/var/tmp/beam-slurm-roots/slurm-24.11"))
"""Where tools/install.d/15-slurm-24.11-root.sh builds the Debian 13 root (shared by every checkout)."""
ROOT_STAMP = ".beam-slurm-root-recipe"
"""File at the top of the root: the recipe's hash; its presence at `/` also tells a wrapper it already runs inside."""
ROOT_INSTALL_PART = Path(__file__).resolve().parent / "install.d" / "15-slurm-24.11-root.sh"
BOOKWORM_LIBMARIADB_DIR = "/opt/beam-bookworm-libmariadb"
"""Debian 12's MariaDB client library for slurmdbd 24.11.5 (it fails against Debian 13's own), inside the root."""
CHECKOUT = Path(__file__).resolve().parent.parent
"""This checkout (wherever it is cloned): bound into the root, with its venvs, so jobs run the same code."""
CHECKOUT_VENVS = (".venv", ".venv-skyrl")
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/var", "/boot", "/run")
"""The root's own system: never covered by a bind from this machine (/usr/local, /var/tmp, ... below them may be)."""
ROOT_SYSTEM_BINDS = ("/proc", "/sys", "/dev", "/dev/pts", "/dev/shm")
BIND_ENV = "BEAM_SANDBOX_BIND"


def host_is_debian_13() -> bool:
    """Debian 13's own Slurm is 24.11: there the 24.11 cluster runs the host's programs (no root)."""
    with contextlib.suppress(OSError):
        return Path("/etc/debian_version").read_text().startswith("13")
    return False


def select_version(name: str) -> SlurmVersion:
    """Make this module's names, addresses and ports those of one version's cluster (one version per process)."""
    if name not in SLURM_VERSIONS:
        raise SandboxError(f"--slurm-version {name}: choose one of {', '.join(SLURM_VERSIONS)}")
    version = SLURM_VERSIONS[name]
    globals().update(
        SLURM_VERSION=version.name, NETNS_PREFIX=version.netns_prefix, BRIDGE=version.bridge,
        VETH_PREFIX=version.veth_prefix, FABRIC_BRIDGE=version.fabric_bridge,
        FABRIC_VETH_PREFIX=version.fabric_veth_prefix, SUBNET=ipaddress.ip_network(version.subnet),
        FABRIC_SUBNET=ipaddress.ip_network(version.fabric_subnet), CONTROLLER_IP=version.controller_ip,
        SLURMCTLD_PORT=version.slurmctld_port, SLURMDBD_PORT=version.slurmdbd_port,
        MARIADB_PORT=version.mariadb_port, DAEMON_MARKER=version.daemon_marker, LOCK_NAME=version.lock_name,
        SLURM_ROOT=SLURM_2411_ROOT if name == "24.11" and not host_is_debian_13() else None)
    return version


@contextlib.contextmanager
def selected_version(name: str):
    """select_version for a block (tests), then back to the version selected before."""
    before = SLURM_VERSION
    select_version(name)
    try:
        yield SLURM_VERSIONS[name]
    finally:
        select_version(before)


@dataclasses.dataclass(frozen=True)
class Node:
    """One compute node of the sandbox."""

    name: str
    """Hostname inside the node and Slurm NodeName (n1, n2, ...)."""
    ip: str
    """Address on the sandbox bridge (10.77.0.11, ...)."""
    index: int
    """1-based position, used for the veth and namespace names."""

    @property
    def netns(self) -> str:
        """Name of the node's network namespace."""
        return f"{NETNS_PREFIX}{self.name}"

    @property
    def veth(self) -> str:
        """Host end of the node's veth pair (the node end is eth0 inside the namespace)."""
        return f"{VETH_PREFIX}{self.index}"

    @property
    def fabric_ip(self) -> str:
        """Address of the node's fabric interface (fab0) on the fabric bridge (10.78.0.11, ...)."""
        return str(FABRIC_SUBNET.network_address + FIRST_NODE_HOST_OCTET + self.index - 1)

    @property
    def fabric_veth(self) -> str:
        """Host end of the node's fabric veth pair; setting it down cuts the node's fabric link only."""
        return f"{FABRIC_VETH_PREFIX}{self.index}"


def make_nodes(count: int) -> list[Node]:
    """Nodes n1..n<count> with consecutive addresses from FIRST_NODE_HOST_OCTET."""
    if not 1 <= count <= 64:
        raise SandboxError(f"--nodes {count}: choose between 1 and 64 nodes")
    return [Node(f"n{i}", str(SUBNET.network_address + FIRST_NODE_HOST_OCTET + i - 1), i) for i in range(1, count + 1)]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where everything lives under the state dir."""

    root: Path
    """The state dir itself (BEAM_SANDBOX_DIR)."""

    @property
    def etc(self) -> Path:
        """Generated configuration: SLURM_FILES (slurm.conf, gres.conf, ...), hosts."""
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        """The cluster's slurm.conf; clients find it through SLURM_CONF."""
        return self.etc / "slurm.conf"

    @property
    def run(self) -> Path:
        """Pid files and the config fingerprint of the running daemons."""
        return self.root / "run"

    @property
    def log(self) -> Path:
        """Daemon logs (slurmctld.log, slurmd-n1.log, slurmdbd.log, munged.log, mariadb.log)."""
        return self.root / "log"

    @property
    def munge_dir(self) -> Path:
        """munged's key, socket and seed (owned by the munge user)."""
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        """munged's socket, named in AuthInfo so the system munge (if any) is not used."""
        return self.munge_dir / "munge.socket"

    @property
    def mysql_dir(self) -> Path:
        """MariaDB data dir."""
        return self.root / "mysql"

    @property
    def mysql_socket(self) -> Path:
        """MariaDB's local socket, used to set up the accounting user."""
        return self.root / "run" / "mysqld.sock"

    @property
    def shared(self) -> Path:
        """Directory for job outputs; every node sees it (as it sees all of the filesystem but /tmp)."""
        return self.root / "shared"

    @property
    def bin(self) -> Path:
        """Slurm 24.11's client commands on Debian 12: wrappers that run the root's own (`env` puts them on PATH)."""
        return self.root / "bin"

    def node_tmp(self, node: Node) -> Path:
        """Directory mounted on /tmp inside the node."""
        return self.root / "nodes" / node.name / "tmp"

    def node_gpu_dir(self, node: Node) -> Path:
        """The node's fake GPU device files (symlinks to /dev/null)."""
        return self.root / "dev" / node.name

    def pid_file(self, daemon: str) -> Path:
        """Pid file of a daemon started by this tool."""
        return self.run / f"{daemon}.pid"


def log(message: str) -> None:
    print(f"slurm-sandbox: {message}", flush=True)


def run_command(args: list[str], check: bool = True, env: dict | None = None, timeout: float = 60,
                input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run a short command and capture its output; on failure raise a SandboxError that shows it."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, input=input_text)
    except subprocess.TimeoutExpired as exc:
        raise SandboxError(f"`{shlex.join(args)}` did not finish within {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        raise SandboxError(f"`{shlex.join(args)}` failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc


def wait_until(description: str, probe, timeout: float, interval: float = 0.1, diagnose=None, alive=None):
    """Poll probe() until it returns something truthy; raise a SandboxError naming what did not come up.

    alive, if given, is checked too so that a daemon that died on start fails at once instead of at the timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if alive is not None and not alive():
            detail = f"\n{diagnose()}" if diagnose else ""
            raise SandboxError(f"{description} exited during start-up{detail}")
        if time.monotonic() > deadline:
            detail = f"\n{diagnose()}" if diagnose else ""
            raise SandboxError(f"{description} not ready after {timeout:.0f} s{detail}")
        time.sleep(interval)
        interval = min(interval * 1.5, 1.0)


def tail(path: Path, lines: int = 15) -> str:
    """Last lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return f"last lines of {path}:\n" + "\n".join("  " + line for line in text[-lines:])


# ---------------------------------------------------------------------------------------------------------------
# Processes


def read_proc_environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def sandbox_daemons() -> dict[int, tuple[str, str]]:
    """pid -> (state dir, daemon name) of every process started by any sandbox (found by its marker variable)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        marker = read_proc_environ(int(entry.name)).get(DAEMON_MARKER)
        if marker:
            state_dir, _, name = marker.rpartition(":")
            found[int(entry.name)] = (state_dir, name)
    return found


def daemon_pid(layout: Layout, daemon: str) -> int | None:
    """Pid of our daemon if it is alive (checked against its marker, so a recycled pid is not mistaken for it)."""
    try:
        pid = int(layout.pid_file(daemon).read_text().strip())
    except (OSError, ValueError):
        return None
    if read_proc_environ(pid).get(DAEMON_MARKER) != f"{layout.root}:{daemon}":
        return None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    return None if state in ("Z", "X") else pid


def start_daemon(layout: Layout, daemon: str, args: list[str], user: str | None = None,
                 extra_env: dict[str, str] | None = None) -> int:
    """Start a daemon in the foreground mode of its program, detached from us, logging to log/<daemon>.out."""
    env = {"PATH": DAEMON_PATH, "LANG": "C.UTF-8", "SLURM_CONF": str(layout.slurm_conf),
           DAEMON_MARKER: f"{layout.root}:{daemon}", **(extra_env or {})}
    out = open(layout.log / f"{daemon}.out", "ab")
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd="/", start_new_session=True, user=user, group=user,
                                extra_groups=[] if user else None)
    finally:
        out.close()
    layout.pid_file(daemon).write_text(f"{proc.pid}\n")
    # Until the child has exec'd, /proc shows our own environment; wait for the marker so liveness checks hold.
    wait_until(f"{daemon} exec", lambda: proc.poll() is not None or daemon_pid(layout, daemon), 10, interval=0.005)
    return proc.pid


def stop_pids(pids: list[int], timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL whatever is left."""
    alive = [pid for pid in pids if pid_exists(pid)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in alive if pid_exists(pid)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def pid_exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":
        # Our own child that has exited: reap it so it does not linger as a zombie.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def tcp_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def unix_socket_open(path: Path) -> bool:
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        sock.connect(str(path))
        return True
    return False


# ---------------------------------------------------------------------------------------------------------------
# Configuration


def slurm_conf_text(layout: Layout, nodes: list[Node]) -> str:
    node_list = node_range(nodes)
    lane_lines = "\n".join(partition_lines(node_range(lane), lane_prefix(k + 1)) for k, lane in enumerate(lanes(nodes)))
    node_lines = "\n".join(
        f"NodeName={n.name} NodeAddr={n.ip} NodeHostname={n.name} CPUs={CPUS_PER_NODE} "
        f"RealMemory={MEMORY_MB_PER_NODE} Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN" for n in nodes)
    root = layout.root
    # 23.11 removed switch/none (no switch plugin is the default); 23.02 moved preempt_send_user_signal.
    switch_line = "" if SLURM_VERSION == "24.11" else "SwitchType=switch/none\n"
    preempt_signal_line = ("PreemptParameters=send_user_signal" if SLURM_VERSION == "24.11"
                           else "SlurmctldParameters=preempt_send_user_signal")
    return f"""\
{GENERATED_HEADER}; rewritten on every `up`.
ClusterName={CLUSTER_NAME}
SlurmctldHost={CONTROLLER_HOSTNAME}({CONTROLLER_IP})
SlurmctldPort={SLURMCTLD_PORT}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Own munge socket (not the system one); short credential lifetime so a requeued job may start ~11 s later.
AuthInfo=socket={layout.munge_socket},cred_expire=10
StateSaveLocation={root}/ctld-state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.daemon.pid
SlurmdPidFile={root}/run/slurmd-%n.daemon.pid
SlurmctldLogFile={layout.log}/slurmctld.log
SlurmdLogFile={layout.log}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# This kernel offers cgroup v1 only partly: track processes by parent pid, no task confinement.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
{switch_line}MailProg=/bin/true
# Declared CPUs/memory/GPUs are used as they are, whatever this machine really has.
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=60
MessageTimeout=20
KillWait=10
InactiveLimit=0
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
GresTypes=gpu
JobRequeue=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
{preempt_signal_line}
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost={CONTROLLER_IP}
AccountingStoragePort={SLURMDBD_PORT}
# For slurmdbd connections Slurm takes the munge socket from here, not from AuthInfo.
AccountingStoragePass={layout.munge_socket}
AccountingStorageTRES=gres/gpu
# QOS and association limits apply (a job over them waits for ever); without DenyOnLimit, sbatch still takes it.
AccountingStorageEnforce=limits
JobCompType=jobcomp/none
# Lanes: sbatch/salloc with BEAM_SANDBOX_LANE=<k> default to partition lane<k>-batch (cli_filter.lua beside this).
CliFilterPlugins=cli_filter/lua
{node_lines}
{partition_lines(node_list, "")}
{lane_lines}
{LIMITED_PARTITION.format(nodes=node_list)}
{NO_NOTICE_PARTITION.format(nodes=node_list)}
"""

LIMITED_PARTITION = ("PartitionName=short Nodes={nodes} MaxTime=00:20:00 DefaultTime=00:10:00 MaxNodes=2 State=UP "
                     "PriorityTier=1 PreemptMode=OFF")
"""A partition with limits that EnforcePartLimits=NO (the default) leaves to the scheduler: sbatch takes a job over
them, which then waits for ever (PartitionTimeLimit, PartitionNodeLimit). Over every node, so a lane's DOWN node never
changes what it says; no test job runs in it."""
NO_NOTICE_PARTITION = ("PartitionName=nonotice Nodes={nodes} MaxTime=INFINITE State=UP PriorityTier=1 "
                       "PreemptMode=CANCEL GraceTime=0")
"""A partition whose jobs a preemption ends without a notice (`high`, of a higher PriorityTier, preempts it; CANCEL
with GraceTime 0 kills at once, whatever the user signal): what `beam-slurm doctor` reports as broken. Over every
node, so a lane's DOWN node never changes what it says; no test job runs in it."""
LIMITED_QOS = ("brief", "MaxWall=00:15:00", "MaxTRESPerJob=node=2")
"""A QOS with per-job limits (AccountingStorageEnforce=limits applies them; a job over them waits for ever)."""


def partition_lines(node_list: str, prefix: str) -> str:
    """The three partitions over node_list: `batch` (never preempted), `low` (preemptable) and `high` (preempts
    `low`), named `<prefix>batch`, `<prefix>low`, `<prefix>high`; the unprefixed `batch` is the default."""
    default = "Default=YES " if not prefix else ""
    return (f"PartitionName={prefix}batch Nodes={node_list} {default}MaxTime=INFINITE State=UP PriorityTier=1 "
            "PreemptMode=OFF\n"
            f"PartitionName={prefix}low Nodes={node_list} MaxTime=INFINITE State=UP PriorityTier=1 "
            "PreemptMode=REQUEUE GraceTime=20\n"
            f"PartitionName={prefix}high Nodes={node_list} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF")


def lanes(nodes: list[Node]) -> list[list[Node]]:
    """Disjoint groups of NODES_PER_LANE nodes (n1-n4, n5-n8, ...), each with partitions of its own (`lane<k>-batch`,
    `-low`, `-high`), so test scenarios can run side by side without taking, preempting or downing each other's
    nodes. A sandbox of fewer than two lanes' nodes has none."""
    count = len(nodes) // NODES_PER_LANE
    if count < 2:
        return []
    return [nodes[k * NODES_PER_LANE:(k + 1) * NODES_PER_LANE] for k in range(count)]


def lane_prefix(index: int) -> str:
    """Partition-name prefix of lane `index` (1-based)."""
    return f"lane{index}-"


def node_range(nodes: list[Node]) -> str:
    first, last = nodes[0].name[1:], nodes[-1].name[1:]
    return f"n[{first}-{last}]" if len(nodes) > 1 else nodes[0].name


def gres_conf_text(layout: Layout, nodes: list[Node]) -> str:
    lines = ["# Fake GPUs: device files must exist and be character devices, hence symlinks to /dev/null."]
    for node in nodes:
        lines.append(f"NodeName={node.name} Name=gpu File={layout.node_gpu_dir(node)}/gpu[0-{GPUS_PER_NODE - 1}]")
    return "\n".join(lines) + "\n"


CGROUP_CONF = "CgroupPlugin=cgroup/v1\nCgroupAutomount=yes\nConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n"
CGROUP_CONF_2411 = "# slurmd 24.11 always loads a cgroup plugin; none of this kernel's cgroups are mounted in the root.\nCgroupPlugin=disabled\n"


def cgroup_conf_text() -> str:
    return CGROUP_CONF_2411 if SLURM_VERSION == "24.11" else CGROUP_CONF
LANE_ENV = "BEAM_SANDBOX_LANE"
"""A lane number (1, 2, ...) in the environment of sbatch or salloc: a job that names no partition anywhere (command
line, SBATCH_PARTITION, #SBATCH header) goes to that lane's `batch` partition instead of the cluster's default."""
# Slurm's client-side filter (cli_filter/lua, read from beside slurm.conf by sbatch, salloc and srun): the lane's
# default is set before option processing, so every partition the job names itself still wins. srun inside a job
# keeps its allocation's partition.
CLI_FILTER_LUA = f"""\
-- Generated by tools/slurm_sandbox.py: a per-lane default partition (tools/slurm_sandbox.py, LANE_ENV).
local function program()
  local file = io.open("/proc/self/cmdline", "r")
  if not file then return "" end
  local first = (file:read("*a") or ""):match("^[^%z]*") or ""
  file:close()
  return first:match("[^/]*$")
end

function slurm_cli_setup_defaults(options, early)
  local lane = os.getenv("{LANE_ENV}")
  if lane == nil or not lane:match("^%d+$") then return slurm.SUCCESS end
  local name = program()
  if name == "sbatch" or name == "salloc" or (name == "srun" and os.getenv("SLURM_JOB_ID") == nil) then
    options["partition"] = "lane" .. lane .. "-batch"
  end
  return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
  return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, jobid, stepid)
  return slurm.SUCCESS
end
"""


def slurmdbd_conf_text(layout: Layout, db_password: str) -> str:
    return f"""\
# Generated by tools/slurm_sandbox.py
AuthType=auth/munge
AuthInfo=socket={layout.munge_socket}
DbdHost=localhost
DbdPort={SLURMDBD_PORT}
SlurmUser=root
LogFile={layout.log}/slurmdbd.log
PidFile={layout.run}/slurmdbd.daemon.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={MARIADB_PORT}
StorageUser=slurm
StoragePass={db_password}
StorageLoc=slurm_acct_db
"""


def hosts_text(nodes: list[Node]) -> str:
    lines = ["127.0.0.1 localhost", f"{CONTROLLER_IP} {CONTROLLER_HOSTNAME}"]
    lines += [f"{n.ip} {n.name}" for n in nodes]
    return "\n".join(lines) + "\n"


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> None:
    """Atomic write (temp + rename), skipped when the content is already there."""
    if path.exists() and path.read_text() == text:
        os.chmod(path, mode)
        return
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def prepare_files(layout: Layout, nodes: list[Node]) -> str:
    """Create directories, munge key, fake GPUs and configs; return a fingerprint of the Slurm configuration."""
    for directory in (layout.root, layout.etc, layout.run, layout.log, layout.root / "ctld-state", layout.root / "spool"):
        directory.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.root, 0o755)
    layout.shared.mkdir(exist_ok=True)
    os.chmod(layout.shared, 0o1777)
    for node in nodes:
        tmp = layout.node_tmp(node)
        tmp.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o1777)
        (layout.root / "spool" / node.name).mkdir(exist_ok=True)
        gpu_dir = layout.node_gpu_dir(node)
        gpu_dir.mkdir(parents=True, exist_ok=True)
        for index in range(GPUS_PER_NODE):
            device = gpu_dir / f"gpu{index}"
            if not device.is_symlink():
                device.unlink(missing_ok=True)
                device.symlink_to("/dev/null")

    munge_uid, munge_gid = munge_ids()
    layout.munge_dir.mkdir(exist_ok=True)
    os.chown(layout.munge_dir, munge_uid, munge_gid)
    # munged insists that every client can reach its socket; the key itself stays 0400.
    os.chmod(layout.munge_dir, 0o755)
    key = layout.munge_dir / "munge.key"
    if not key.exists():
        key.write_bytes(secrets.token_bytes(1024))
    os.chown(key, munge_uid, munge_gid)
    os.chmod(key, 0o400)

    password_file = layout.etc / "db.password"
    if not password_file.exists():
        write_if_changed(password_file, secrets.token_hex(16), 0o600)
    db_password = password_file.read_text().strip()

    for name, text in slurm_file_texts(layout, nodes, db_password).items():
        write_if_changed(layout.etc / name, text, 0o600 if name in PRIVATE_FILES else 0o644)
    write_if_changed(layout.etc / "hosts", hosts_text(nodes))
    if SLURM_ROOT:
        write_client_wrappers(layout, SLURM_ROOT)
    return config_fingerprint(layout, nodes)


def munge_ids() -> tuple[int, int]:
    """uid and gid of the user munged runs as: the host's `munge`, or the root's (other numbers than the host's)."""
    if not SLURM_ROOT:
        munge = pwd.getpwnam("munge")
        return munge.pw_uid, munge.pw_gid
    for line in (SLURM_ROOT / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == "munge":
            return int(fields[2]), int(fields[3])
    raise SandboxError(f"no munge user in {SLURM_ROOT}/etc/passwd; rebuild the root: {ROOT_BUILD_COMMAND}")


def slurm_file_texts(layout: Layout, nodes: list[Node], db_password: str) -> dict[str, str]:
    """The text of each of SLURM_FILES, by name."""
    texts = (slurm_conf_text(layout, nodes), gres_conf_text(layout, nodes), cgroup_conf_text(), CLI_FILTER_LUA,
             slurmdbd_conf_text(layout, db_password))
    return dict(zip(SLURM_FILES, texts, strict=True))


def config_fingerprint(layout: Layout, nodes: list[Node]) -> str:
    """Hash of the Slurm configuration this code generates; differs from the running one after an upgrade."""
    text = slurm_conf_text(layout, nodes) + gres_conf_text(layout, nodes) + cgroup_conf_text() + CLI_FILTER_LUA
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------------------
# Network


def netns_list() -> list[str]:
    proc = run_command(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def ensure_network(nodes: list[Node]) -> None:
    """Bridge with the controller address on the host side; one namespace + veth per node. Repairs what is missing."""
    if not link_exists(BRIDGE):
        run_command(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addresses = run_command(["ip", "-4", "-o", "addr", "show", "dev", BRIDGE]).stdout
    if f" {CONTROLLER_IP}/" not in addresses:
        run_command(["ip", "addr", "add", f"{CONTROLLER_IP}/{SUBNET.prefixlen}", "dev", BRIDGE])
    run_command(["ip", "link", "set", BRIDGE, "up"])
    # Frames between nodes stay on the bridge; keep host firewall rules (if any) out of the way.
    for knob in ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables"):
        with contextlib.suppress(OSError):
            Path(f"/proc/sys/net/bridge/{knob}").write_text("0")

    existing = set(netns_list())
    wanted = {node.netns for node in nodes}
    for stale in sorted(n for n in existing if n.startswith(NETNS_PREFIX) and n not in wanted):
        remove_netns(stale)
    for node in nodes:
        if node.netns not in existing:
            run_command(["ip", "netns", "add", node.netns])
        in_ns = ["ip", "netns", "exec", node.netns]
        has_eth0 = run_command(in_ns + ["ip", "link", "show", "eth0"], check=False).returncode == 0
        if not has_eth0:
            if link_exists(node.veth):
                run_command(["ip", "link", "del", node.veth])
            run_command(["ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns])
        run_command(["ip", "link", "set", node.veth, "master", BRIDGE, "up"])
        node_addr = run_command(in_ns + ["ip", "-4", "-o", "addr", "show", "dev", "eth0"]).stdout
        if f" {node.ip}/" not in node_addr:
            run_command(in_ns + ["ip", "addr", "add", f"{node.ip}/{SUBNET.prefixlen}", "dev", "eth0"])
        run_command(in_ns + ["ip", "link", "set", "lo", "up"])
        run_command(in_ns + ["ip", "link", "set", "eth0", "up"])
        routes = run_command(in_ns + ["ip", "route", "show", "default"]).stdout
        if CONTROLLER_IP not in routes:
            # A default route lets programs that pick "the address used to reach the outside" (Ray) find eth0.
            run_command(in_ns + ["ip", "route", "replace", "default", "via", CONTROLLER_IP])


def ensure_fabric(nodes: list[Node]) -> None:
    """The fabric bridge and each node's fab0 with its address; adds only what is missing, so running daemons and
    jobs are untouched. A link someone set down on purpose (a test) stays down: `status` reports it."""
    if not link_exists(FABRIC_BRIDGE):
        run_command(["ip", "link", "add", FABRIC_BRIDGE, "type", "bridge"])
        run_command(["ip", "link", "set", FABRIC_BRIDGE, "up"])
    for node in nodes:
        in_ns = ["ip", "netns", "exec", node.netns]
        if run_command(in_ns + ["ip", "link", "show", FABRIC_INTERFACE], check=False).returncode != 0:
            if link_exists(node.fabric_veth):
                run_command(["ip", "link", "del", node.fabric_veth])
            run_command(["ip", "link", "add", node.fabric_veth, "type", "veth", "peer", "name", FABRIC_INTERFACE,
                         "netns", node.netns])
            run_command(["ip", "link", "set", node.fabric_veth, "master", FABRIC_BRIDGE, "up"])
            run_command(in_ns + ["ip", "link", "set", FABRIC_INTERFACE, "up"])
        elif not Path(f"/sys/class/net/{node.fabric_veth}/master").exists():
            run_command(["ip", "link", "set", node.fabric_veth, "master", FABRIC_BRIDGE, "up"])
        addresses = run_command(in_ns + ["ip", "-4", "-o", "addr", "show", "dev", FABRIC_INTERFACE]).stdout
        if f" {node.fabric_ip}/" not in addresses:
            run_command(in_ns + ["ip", "addr", "add", f"{node.fabric_ip}/{FABRIC_SUBNET.prefixlen}",
                                 "dev", FABRIC_INTERFACE])
        ensure_fast_failing_dns(node)


def host_nameservers() -> list[str]:
    """IPv4 name servers of this machine (/etc/resolv.conf), which the nodes' namespaces cannot reach."""
    with contextlib.suppress(OSError):
        return [fields[1] for fields in (line.split() for line in Path("/etc/resolv.conf").read_text().splitlines())
                if len(fields) > 1 and fields[0] == "nameserver" and fields[1].count(".") == 3]
    return []


def ensure_fast_failing_dns(node: Node) -> None:
    """Make the host's name servers unreachable inside the node, so a lookup the hosts file cannot answer (a reverse
    lookup of an IPv4-mapped address, as torch.distributed's store does for every connection) fails at once
    instead of after the resolver's 10 s of time-outs."""
    in_ns = ["ip", "netns", "exec", node.netns]
    routes = run_command(in_ns + ["ip", "route", "show", "type", "unreachable"]).stdout
    for server in host_nameservers():
        if server not in routes.split():
            run_command(in_ns + ["ip", "route", "replace", "unreachable", f"{server}/32"])


def fabric_problems(nodes: list[Node]) -> list[str]:
    """What is missing of the fabric (a link that is only down is not missing)."""
    if not link_exists(FABRIC_BRIDGE):
        return [f"fabric bridge {FABRIC_BRIDGE} missing"]
    problems = []
    for node in nodes:
        if fabric_address(node) != node.fabric_ip:
            problems.append(f"fabric interface {FABRIC_INTERFACE} of {node.name} missing or without {node.fabric_ip}")
        elif not Path(f"/sys/class/net/{node.fabric_veth}/master").exists():
            problems.append(f"fabric link {node.fabric_veth} of {node.name} not on {FABRIC_BRIDGE}")
    servers = host_nameservers()
    if servers:
        routes = run_command(["ip", "netns", "exec", nodes[0].netns, "ip", "route", "show", "type", "unreachable"],
                             check=False).stdout.split()
        if servers[0] not in routes:
            problems.append(f"name server {servers[0]} reachable in {nodes[0].name}: lookups would wait for time-outs")
    return problems


def fabric_address(node: Node) -> str | None:
    """The IPv4 address of fab0 inside the node, or None."""
    proc = run_command(["ip", "netns", "exec", node.netns, "ip", "-4", "-o", "addr", "show", "dev", FABRIC_INTERFACE],
                       check=False)
    fields = proc.stdout.split()
    return fields[fields.index("inet") + 1].split("/")[0] if proc.returncode == 0 and "inet" in fields else None


def fabric_link_state(node: Node) -> str:
    """`up`, `down` (host end set down: the node's fab0 has no carrier) or `missing`."""
    try:
        return Path(f"/sys/class/net/{node.fabric_veth}/operstate").read_text().strip()
    except OSError:
        return "missing"


def remove_netns(name: str) -> None:
    """Kill every process still inside the namespace, then delete it (its veth goes with it)."""
    pids = run_command(["ip", "netns", "pids", name], check=False).stdout.split()
    stop_pids([int(p) for p in pids if p.isdigit()], timeout=5)
    run_command(["ip", "netns", "del", name], check=False)


def remove_network() -> None:
    for name in netns_list():
        if name.startswith(NETNS_PREFIX):
            remove_netns(name)
    for link in Path("/sys/class/net").iterdir():
        if link.name.startswith((VETH_PREFIX, FABRIC_VETH_PREFIX)):
            run_command(["ip", "link", "del", link.name], check=False)
    for bridge in (BRIDGE, FABRIC_BRIDGE):
        if link_exists(bridge):
            run_command(["ip", "link", "del", bridge], check=False)


# ---------------------------------------------------------------------------------------------------------------
# The Debian 13 root of the 24.11 cluster (Debian 12 hosts)

ROOT_BUILD_COMMAND = "sudo bash tools/install.sh 15-slurm-24.11-root"


def root_problem(root: Path) -> str | None:
    """Why the root cannot be used (missing, half built), or None; with the command that builds it."""
    if not (root / ROOT_STAMP).is_file() or not (root / "usr" / "sbin" / "slurmctld").exists():
        return (f"the Slurm 24.11 root is missing at {root} (Slurm 24.11 needs Debian 13's glibc; this machine runs "
                f"Debian 12). Build it once (about 2 minutes and 200 MB, from the Debian mirror apt uses) with:\n"
                f"  {ROOT_BUILD_COMMAND}\n(or BEAM_SLURM_2411=1 bash tools/install.sh; BEAM_SLURM_2411_ROOT puts it "
                "elsewhere)")
    return None


def root_is_stale(root: Path) -> bool:
    """Whether the root was built by another recipe than this checkout's install part (a rebuild is due)."""
    with contextlib.suppress(OSError):
        recipe = hashlib.sha256(ROOT_INSTALL_PART.read_bytes()).hexdigest()[:16]
        return (root / ROOT_STAMP).read_text().strip() != recipe
    return False


def unescape_mount_path(field: str) -> str:
    """/proc/self/mountinfo writes space, tab, newline and backslash as octal escapes (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mount_points() -> list[str]:
    """Every mount point of this mount namespace, in mount order."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    return [unescape_mount_path(line.split()[4]) for line in lines if len(line.split()) > 4]


def is_within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def venv_paths(venv: Path) -> list[Path]:
    """A venv's folder, its interpreter's installation (a pyenv Python lives outside the venv) and the sources of
    its editable installs (a venv shared from another checkout imports that checkout's code), symlinks resolved."""
    if not (venv / "bin").is_dir():
        return []
    paths = [venv.resolve()]
    python = venv / "bin" / "python"
    if python.exists():
        interpreter = python.resolve()
        # <prefix>/bin/python3.11: the prefix holds its standard library and shared libraries.
        paths.append(interpreter.parent.parent if interpreter.parent.name == "bin" else interpreter.parent)
    for site in venv.resolve().glob("lib/python*/site-packages"):
        paths += editable_sources(site)
    return paths


def editable_sources(site_packages: Path) -> list[Path]:
    """Folders a site-packages imports from outside itself: absolute paths in its .pth files and the package
    folders of setuptools' editable finders (`MAPPING = {'beam_slurm': '/home/me/beam-slurm/beam_slurm'}`)."""
    found: list[str] = []
    for pth in site_packages.glob("*.pth"):
        with contextlib.suppress(OSError):
            found += [line.strip() for line in pth.read_text().splitlines() if line.startswith("/")]
    for finder in site_packages.glob("__editable__*finder.py"):
        with contextlib.suppress(OSError, ValueError, SyntaxError):
            for line in finder.read_text().splitlines():
                if line.startswith("MAPPING"):
                    found += [str(value) for value in ast.literal_eval(line.split("=", 1)[1].strip()).values()]
    return [Path(path).resolve() for path in found if os.path.isdir(path)]


def bind_paths(checkout: Path, state_dir: Path, extra: str = "", mounts: list[str] | None = None) -> list[Path]:
    """Folders of this machine that the root shows at the same paths, shallowest first: what jobs touch (/tmp,
    /var/tmp, /root and the home folder, the checkout, its venvs and their interpreters, the state dir) and the colon-separated extra
    paths (BEAM_SANDBOX_BIND). Missing paths and the root's own system folders (/usr, /etc, ...; /usr/local and
    /var/tmp are fine) are left out; a path inside another one is left out unless a mount point lies between them
    (a bind mount does not carry the mounts below it)."""
    wanted: list[Path] = [Path("/tmp"), Path("/var/tmp"), Path("/root"), Path.home(), checkout.resolve(), state_dir]
    for name in CHECKOUT_VENVS:
        wanted += venv_paths(checkout / name)
    wanted += [Path(item) for item in extra.split(":") if item.strip()]
    mounts = mount_points() if mounts is None else mounts
    chosen: list[str] = []
    for path in sorted({os.path.normpath(str(p.absolute())) for p in wanted}, key=lambda p: (p.count("/"), p)):
        if not os.path.exists(path) or path == "/":
            continue
        if any(is_within(path, system) and not is_within(path, "/usr/local") and not is_within(path, "/var/tmp")
               for system in SYSTEM_DIRS):
            log(f"not binding {path} into the root: it would cover the root's own {path}")
            continue
        parent = max((c for c in chosen if is_within(path, c)), key=len, default=None)
        if parent is not None and not any(m != parent and is_within(m, parent) and is_within(path, m) for m in mounts):
            continue
        chosen.append(path)
    return [Path(p) for p in chosen]


def root_mounts(root: Path) -> list[str]:
    """Mount points inside the root, in mount order."""
    return [m for m in mount_points() if is_within(m, str(root)) and m != str(root)]


def ensure_root_mounts(root: Path, layout: Layout) -> list[str]:
    """Bind /proc, /sys, /dev and bind_paths() into the root, each at its own path; adds only what is missing and
    returns what it added. Each bind is private, so nothing mounted later on this machine propagates into it (or
    out of it), nor into the namespaces of daemons already running: those must start again to see a new bind."""
    added = []
    present = set(root_mounts(root))
    binds = [Path(p) for p in ROOT_SYSTEM_BINDS] + bind_paths(CHECKOUT, layout.root, os.environ.get(BIND_ENV, ""))
    for source in binds:
        target = root / str(source).lstrip("/")
        if str(target) in present and not stale_bind(source, target):
            continue
        if str(target) in present:  # the folder was removed and made again (a checkout cloned anew at its path)
            run_command(["umount", "--lazy", str(target)], check=False)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        run_command(["mount", "--bind", str(source), str(target)])
        run_command(["mount", "--make-private", str(target)])
        added.append(str(source))
    return added


def stale_bind(source: Path, target: Path) -> bool:
    """Whether the bind at `target` shows another folder than `source` is now (it was removed and made again: the
    bind still shows the removed one, so jobs would not find the new checkout's files)."""
    try:
        now, bound = source.stat(), target.stat()
    except OSError:
        return False
    return (now.st_dev, now.st_ino) != (bound.st_dev, bound.st_ino)


def missing_root_binds(root: Path, layout: Layout) -> list[str]:
    """The folders ensure_root_mounts binds that are not bound now (or bound to a folder since removed)."""
    present = set(root_mounts(root))
    binds = [*ROOT_SYSTEM_BINDS, *map(str, bind_paths(CHECKOUT, layout.root, os.environ.get(BIND_ENV, "")))]
    return [
        path
        for path in binds
        if str(root / path.lstrip("/")) not in present or stale_bind(Path(path), root / path.lstrip("/"))
    ]


def remove_root_mounts(root: Path) -> None:
    """Unmount everything inside the root, deepest first (lazily where something still uses it)."""
    for target in sorted(root_mounts(root), key=lambda m: -m.count("/")):
        if run_command(["umount", target], check=False).returncode != 0:
            run_command(["umount", "--lazy", target], check=False)
    left = root_mounts(root)
    if left:
        raise SandboxError(f"still mounted inside {root}: {', '.join(left)}")


def client_programs(root: Path) -> list[str]:
    """Names of the Slurm client commands of the root (slurm-client's /usr/bin programs)."""
    listing = root / "var" / "lib" / "dpkg" / "info" / "slurm-client.list"
    names = [Path(line).name for line in listing.read_text().splitlines() if line.startswith("/usr/bin/")]
    return sorted(name for name in names if (root / "usr" / "bin" / name).is_file())


SUBMITTING_PROGRAMS = ("sbatch", "srun", "salloc", "sattach", "scrontab")
"""Client commands whose working directory matters (the job's): they refuse to run from a folder the root lacks."""


def client_wrapper_text(root: Path, program: str) -> str:
    """A shell script that runs the root's own `program` inside the root, in the caller's working directory."""
    if program in SUBMITTING_PROGRAMS:
        elsewhere = (f'echo "{program}: the working directory $1 is not visible inside the Slurm 24.11 root {root}; '
                     f'run it from a bound folder or add this one to {BIND_ENV} and run '
                     'tools/slurm_sandbox.py up --slurm-version 24.11 again" >&2; exit 1')
    else:
        elsewhere = "cd /"
    inner = f'cd "$1" 2>/dev/null || {{ {elsewhere}; }}; shift; exec "$@"'
    return (f"#!/bin/sh\n{GENERATED_HEADER}: Slurm 24.11's {program}, run inside {root} (chroot; needs root).\n"
            f"if [ -e /{ROOT_STAMP} ]; then exec /usr/bin/{program} \"$@\"; fi\n"
            f"exec /usr/sbin/chroot {shlex.quote(str(root))} /bin/sh -c {shlex.quote(inner)} sh \"$(pwd -P)\" "
            f"/usr/bin/{program} \"$@\"\n")


def write_client_wrappers(layout: Layout, root: Path) -> None:
    """<state dir>/bin: one wrapper per client command of the root; the root's /etc/slurm/slurm.conf names ours."""
    layout.bin.mkdir(exist_ok=True)
    programs = client_programs(root)
    for program in programs:
        write_if_changed(layout.bin / program, client_wrapper_text(root, program), 0o755)
    for stale in layout.bin.iterdir():
        if stale.name not in programs and stale.read_text(errors="replace").startswith(f"#!/bin/sh\n{GENERATED_HEADER}"):
            stale.unlink()
    link = root / "etc" / "slurm" / "slurm.conf"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists() or link.is_symlink():
        link.unlink(missing_ok=True)
        link.symlink_to(layout.slurm_conf)


def in_root(program: list[str]) -> list[str]:
    """program run inside the root (chroot), or as it is where the cluster uses this machine's own Slurm."""
    return ["chroot", str(SLURM_ROOT), *program] if SLURM_ROOT else program


def slurmdbd_env() -> dict[str, str]:
    """slurmdbd 24.11.5 needs Debian 12's MariaDB client library (Debian 13's fails its first query)."""
    if SLURM_VERSION != "24.11":
        return {}
    host_side = (SLURM_ROOT or Path("/")) / BOOKWORM_LIBMARIADB_DIR.lstrip("/")
    return {"LD_LIBRARY_PATH": BOOKWORM_LIBMARIADB_DIR} if host_side.is_dir() else {}


def env_lines(layout: Layout, path: str) -> list[str]:
    """What a shell needs for this cluster, as `export NAME=VALUE` lines with literal values: SLURM_CONF, for 24.11
    PATH with that version's client commands first, and BEAM_SANDBOX_SHARED (the folder every node sees)."""
    variables = {"SLURM_CONF": str(layout.slurm_conf)}
    if SLURM_VERSION == "24.11":
        first = str(layout.bin) if SLURM_ROOT else "/usr/bin"
        variables["PATH"] = ":".join([first, *(p for p in path.split(":") if p and p != first)])
    variables["BEAM_SANDBOX_SHARED"] = str(layout.shared)
    return [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]


# ---------------------------------------------------------------------------------------------------------------
# Daemons


def slurm_env(layout: Layout) -> dict[str, str]:
    path = os.environ.get("PATH", "") + ":" + DAEMON_PATH
    if SLURM_ROOT:
        path = f"{layout.bin}:{path}"
    return {**os.environ, "SLURM_CONF": str(layout.slurm_conf), "PATH": path}


def start_munge(layout: Layout) -> None:
    if daemon_pid(layout, "munged"):
        return
    layout.munge_socket.unlink(missing_ok=True)
    log_file = layout.munge_dir / "munged.log"
    munged = ["munged", "--foreground", f"--socket={layout.munge_socket}", f"--key-file={layout.munge_dir}/munge.key",
              f"--log-file={log_file}", f"--pid-file={layout.munge_dir}/munged.pid",
              f"--seed-file={layout.munge_dir}/munged.seed"]
    if SLURM_ROOT:
        # The root's munge user has other numbers than this machine's; chroot switches to it once inside.
        uid, gid = munge_ids()
        start_daemon(layout, "munged", ["chroot", f"--userspec={uid}:{gid}", f"--groups={gid}", str(SLURM_ROOT),
                                        *munged])
    else:
        start_daemon(layout, "munged", munged, user="munge")
    wait_until("munged", lambda: unix_socket_open(layout.munge_socket), 15,
               diagnose=lambda: tail(log_file) + "\n" + tail(layout.log / "munged.out"),
               alive=lambda: daemon_pid(layout, "munged"))


def start_mariadb(layout: Layout) -> None:
    if not daemon_pid(layout, "mariadbd"):
        if not (layout.mysql_dir / "mysql").is_dir():
            shutil.rmtree(layout.mysql_dir, ignore_errors=True)
            log("initialising the accounting database")
            run_command(["mariadb-install-db", "--no-defaults", f"--datadir={layout.mysql_dir}", "--user=root",
                         "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=180)
        layout.mysql_socket.unlink(missing_ok=True)
        start_daemon(layout, "mariadbd", [
            "mariadbd", "--no-defaults", f"--datadir={layout.mysql_dir}", f"--socket={layout.mysql_socket}",
            f"--pid-file={layout.run}/mariadbd.daemon.pid", "--bind-address=127.0.0.1", f"--port={MARIADB_PORT}",
            "--user=root", f"--log-error={layout.log}/mariadb.log", "--skip-name-resolve",
            # Small footprint: the machine is shared; slurmdbd only records a few thousand jobs here.
            "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-lock-wait-timeout=900",
            "--max-connections=50", "--performance-schema=OFF"])
    wait_until("MariaDB", lambda: unix_socket_open(layout.mysql_socket) and tcp_open("127.0.0.1", MARIADB_PORT), 60,
               diagnose=lambda: tail(layout.log / "mariadb.log"), alive=lambda: daemon_pid(layout, "mariadbd"))
    password = (layout.etc / "db.password").read_text().strip()
    sql = (f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
           f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
           "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
           "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
    # The statement goes on stdin, never on a command line where other users could read the password.
    run_command(["mariadb", "--no-defaults", f"--socket={layout.mysql_socket}", "-u", "root"], input_text=sql)


def start_slurmdbd(layout: Layout) -> None:
    if not daemon_pid(layout, "slurmdbd"):
        start_daemon(layout, "slurmdbd", in_root(["slurmdbd", "-D"]), extra_env=slurmdbd_env())
    wait_until("slurmdbd", lambda: tcp_open("127.0.0.1", SLURMDBD_PORT), 60,
               diagnose=lambda: tail(layout.log / "slurmdbd.log") + "\n" + tail(layout.log / "slurmdbd.out"),
               alive=lambda: daemon_pid(layout, "slurmdbd"))
    env = slurm_env(layout)
    clusters = run_command(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], env=env).stdout.split()
    if CLUSTER_NAME not in clusters:
        run_command(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME], env=env)
    name, *limits = LIMITED_QOS
    if name not in run_command(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], env=env).stdout.split():
        run_command(["sacctmgr", "-i", "add", "qos", name, *limits], env=env)
        run_command(["sacctmgr", "-i", "modify", "user", "root", "set", f"qos+={name}"], env=env)


def in_namespaces_command(hostname: str, tmp_dir: Path | None, hosts: Path, program: list[str]) -> list[str]:
    """Wrap program so it runs with its own hostname, /etc/hosts and (for nodes) /tmp; every step execs. With a
    Debian 13 root, those are the root's /etc/hosts and /tmp, and program runs inside the root."""
    inside = str(SLURM_ROOT) if SLURM_ROOT else ""
    setup = [f"hostname {shlex.quote(hostname)}",
             f"mount --bind {shlex.quote(str(hosts))} {shlex.quote(inside + '/etc/hosts')}"]
    if tmp_dir:
        setup.append(f"mount --bind {shlex.quote(str(tmp_dir))} {shlex.quote(inside + '/tmp')}")
    script = " && ".join(setup) + ' && exec "$@"'
    return ["unshare", "--uts", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
            *in_root(program)]


def start_slurmctld(layout: Layout) -> None:
    if not daemon_pid(layout, "slurmctld"):
        start_daemon(layout, "slurmctld", in_namespaces_command(
            CONTROLLER_HOSTNAME, None, layout.etc / "hosts", ["slurmctld", "-D", "-f", str(layout.slurm_conf)]))
    env = slurm_env(layout)

    def controller_answers() -> bool:
        return tcp_open(CONTROLLER_IP, SLURMCTLD_PORT) and \
            run_command(["scontrol", "ping"], check=False, env=env, timeout=20).stdout.count("UP") > 0
    wait_until("slurmctld", controller_answers, 60,
               diagnose=lambda: tail(layout.log / "slurmctld.log") + "\n" + tail(layout.log / "slurmctld.out"),
               alive=lambda: daemon_pid(layout, "slurmctld"))


def start_node(layout: Layout, node: Node) -> None:
    daemon = f"slurmd-{node.name}"
    if daemon_pid(layout, daemon):
        return
    program = ["slurmd", "-D", "-N", node.name, "-f", str(layout.slurm_conf)]
    start_daemon(layout, daemon, ["ip", "netns", "exec", node.netns, *in_namespaces_command(
        node.name, layout.node_tmp(node), layout.etc / "hosts", program)])


def node_states(layout: Layout) -> dict[str, str]:
    """NodeName -> state as sinfo prints it (idle, mix, alloc, down*, drain, ...)."""
    proc = run_command(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, env=slurm_env(layout), timeout=20)
    states = {}
    for line in proc.stdout.splitlines():
        name, _, state = line.partition(" ")
        states[name] = state.strip()
    return states


HEALTHY_NODE_STATES = {"idle", "mix", "alloc", "comp"}


def wait_for_nodes(layout: Layout, nodes: list[Node]) -> None:
    env = slurm_env(layout)
    resumed = set()

    def all_healthy() -> bool:
        states = node_states(layout)
        for node in nodes:
            state = states.get(node.name, "")
            # A node left drained or down by an earlier run: its slurmd is up now, so put it back in service.
            if state.rstrip("*~#$@") in ("drain", "drng", "down", "fail") and daemon_pid(layout, f"slurmd-{node.name}") \
                    and node.name not in resumed and not state.endswith("*"):
                run_command(["scontrol", "update", f"nodename={node.name}", "state=resume"], check=False, env=env)
                resumed.add(node.name)
        return all(states.get(n.name) in HEALTHY_NODE_STATES for n in nodes)

    def diagnose() -> str:
        dead = [n.name for n in nodes if not daemon_pid(layout, f"slurmd-{n.name}")]
        first_bad = next((n for n in nodes if node_states(layout).get(n.name) not in HEALTHY_NODE_STATES), nodes[0])
        return (f"node states: {node_states(layout)}; slurmd not running on: {dead or 'none'}\n"
                + tail(layout.log / f"slurmd-{first_bad.name}.log") + "\n"
                + tail(layout.log / f"slurmd-{first_bad.name}.out"))
    wait_until("slurm nodes", all_healthy, 60, diagnose=diagnose)


# ---------------------------------------------------------------------------------------------------------------
# Commands


ROOT_PACKAGES = ("munge", "slurmdbd", "slurmctld", "slurmd", "slurm-client")
"""What a Debian 13 root provides instead of this machine (the rest, MariaDB and the namespace tools, is the host's)."""


def missing_packages(search_path: str = DAEMON_PATH) -> list[str]:
    """Debian packages whose programs are not found on search_path."""
    programs = {prog: pkg for prog, pkg in REQUIRED_PROGRAMS.items() if not (SLURM_ROOT and pkg in ROOT_PACKAGES)}
    return sorted({pkg for prog, pkg in programs.items() if not shutil.which(prog, path=search_path)})


def require_root_and_programs(slurm_root: bool = True) -> None:
    """Refuse early, with what to install; slurm_root False: the Debian 13 root need not be there (`down`)."""
    if os.geteuid() != 0:
        raise SandboxError("must run as root (it creates network namespaces and starts system daemons); "
                           "try: sudo tools/slurm_sandbox.py ...")
    if SLURM_ROOT and slurm_root:
        problem = root_problem(SLURM_ROOT)
        if problem:
            raise SandboxError(problem)
    missing = missing_packages()
    if missing:
        raise SandboxError(f"missing Debian packages: {' '.join(missing)}; install with "
                           f"`apt-get install {' '.join(missing)}` or `tools/install.sh 10-apt`")
    for user in () if SLURM_ROOT else ("munge",):
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise SandboxError(f"user `{user}` does not exist; reinstall the munge package") from None


@contextlib.contextmanager
def sandbox_lock():
    """One `up`/`down` at a time on this machine (test sessions of several checkouts may start together)."""
    lock_path = Path("/run/lock" if Path("/run/lock").is_dir() else "/var/tmp") / LOCK_NAME
    # flock is right here: the lock and the sandbox it guards are this machine's own (a node-local file).
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def slurm_daemon_names(nodes: list[Node]) -> list[str]:
    return ["slurmctld", *[f"slurmd-{n.name}" for n in nodes]]


def take_over_foreign(layout: Layout) -> None:
    """Stop daemons of a sandbox started from another state dir: namespaces and ports are machine-wide."""
    foreign = {pid: owner for pid, owner in sandbox_daemons().items() if owner[0] != str(layout.root)}
    if foreign:
        dirs = sorted({owner[0] for owner in foreign.values()})
        log(f"taking over from a sandbox in {', '.join(dirs)}: stopping its {len(foreign)} daemons")
        stop_pids(list(foreign))


def configured_nodes(layout: Layout) -> int | None:
    """Node count of the last `up` in this state dir, so a bare `up` or `status` keeps it."""
    with contextlib.suppress(OSError, ValueError):
        return int((layout.run / "nodes").read_text())
    return None


def cmd_up(layout: Layout, node_count: int | None) -> int:
    require_root_and_programs()
    started = time.monotonic()
    with sandbox_lock():
        node_count = node_count or configured_nodes(layout) or 4
        nodes = make_nodes(node_count)
        if is_healthy(layout, nodes, quiet=True):
            if SLURM_VERSION == DEFAULT_SLURM_VERSION:  # (one brought up before every file beside it was linked)
                link_system_slurm_conf(layout)
            log(f"already up ({node_count} nodes, state dir {layout.root})")
            print_env_hint(layout)
            return 0
        take_over_foreign(layout)
        if SLURM_ROOT:
            if root_is_stale(SLURM_ROOT):
                log(f"note: {SLURM_ROOT} was built by another recipe than {ROOT_INSTALL_PART.name}; rebuild it "
                    f"(after `down --slurm-version 24.11`) with: {ROOT_BUILD_COMMAND}")
            added = ensure_root_mounts(SLURM_ROOT, layout)
            running = [pid for name in slurm_daemon_names(make_nodes(64)) if (pid := daemon_pid(layout, name))]
            if added and running:
                log(f"bound {', '.join(added)} into the root: restarting the Slurm daemons so that jobs see it")
                stop_pids(running)
        fingerprint = prepare_files(layout, nodes)
        fingerprint_file = layout.run / "config.sha"
        previous = fingerprint_file.read_text().strip() if fingerprint_file.exists() else None
        if previous != fingerprint:
            # slurm.conf changed (or an unknown state): restart Slurm; cred_expire and partitions need a restart.
            stale = [pid for name in slurm_daemon_names(make_nodes(64)) if (pid := daemon_pid(layout, name))]
            if stale:
                log("configuration changed: restarting the Slurm daemons")
                stop_pids(stale)
        # Nodes beyond the requested count (from an earlier, larger `up`) go away.
        extra = [pid for name in slurm_daemon_names(make_nodes(64))[node_count + 1:] if (pid := daemon_pid(layout, name))]
        stop_pids(extra)
        ensure_network(nodes)
        ensure_fabric(nodes)
        start_munge(layout)
        start_mariadb(layout)
        start_slurmdbd(layout)
        start_slurmctld(layout)
        fingerprint_file.write_text(fingerprint + "\n")
        (layout.run / "nodes").write_text(f"{node_count}\n")
        for node in nodes:
            start_node(layout, node)
        wait_for_nodes(layout, nodes)
        if SLURM_VERSION == DEFAULT_SLURM_VERSION:
            link_system_slurm_conf(layout)  # plain `sinfo` of this machine is 22.05's
    log(f"up: {node_count} nodes in {time.monotonic() - started:.1f} s (state dir {layout.root})")
    print_env_hint(layout)
    return 0


def system_links(layout: Layout, system_dir: Path = SYSTEM_SLURM_DIR) -> dict[Path, Path]:
    """Link -> sandbox file, for slurm.conf and every file Slurm reads beside it (cli_filter.lua, gres.conf, ...):
    without them a plain `sbatch` finds slurm.conf but not its cli_filter.lua, and refuses every job."""
    return {system_dir / name: layout.etc / name for name in SLURM_FILES}


def link_system_slurm_conf(layout: Layout, system_dir: Path = SYSTEM_SLURM_DIR) -> None:
    """Let plain `sinfo`/`sbatch` find the sandbox (`system_links`), unless the machine has a slurm.conf of its own;
    another file of the machine's own there stays too."""
    own_conf = system_dir / "slurm.conf"
    if own_conf.exists() and not own_conf.is_symlink():
        return
    system_dir.mkdir(parents=True, exist_ok=True)
    for link, target in system_links(layout, system_dir).items():
        if (link.exists() and not link.is_symlink()) or (link.is_symlink() and os.readlink(link) == str(target)):
            continue
        tmp = link.with_name(f".{link.name}.sandbox-tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)


def unlink_system_slurm_conf(system_dir: Path = SYSTEM_SLURM_DIR) -> None:
    """Remove the links `link_system_slurm_conf` made, if slurm.conf's points at a sandbox config (ours or a purged
    one): it and those beside it that point into the same folder."""
    conf = system_dir / "slurm.conf"
    if not conf.is_symlink():
        return
    target = Path(os.readlink(conf))
    with contextlib.suppress(OSError):
        if not target.read_text(errors="replace").startswith(GENERATED_HEADER):
            return
    for name in SLURM_FILES:
        link = system_dir / name
        if link.is_symlink() and Path(os.readlink(link)).parent == target.parent:
            link.unlink()


def print_env_hint(layout: Layout) -> None:
    print("\n".join(env_lines(layout, os.environ.get("PATH", ""))), flush=True)


def cmd_down(layout: Layout, purge: bool) -> int:
    require_root_and_programs(slurm_root=False)
    with sandbox_lock():
        # Everything any sandbox started (found by marker), then whatever still runs inside the namespaces (jobs).
        daemons = sandbox_daemons()
        slurm_first = sorted(daemons, key=lambda pid: daemons[pid][1] in ("slurmdbd", "mariadbd", "munged"))
        stop_pids([pid for pid in slurm_first if daemons[pid][1] not in ("slurmdbd", "mariadbd", "munged")])
        stop_pids([pid for pid in slurm_first if daemons[pid][1] == "slurmdbd"])
        stop_pids([pid for pid in slurm_first if daemons[pid][1] in ("mariadbd", "munged")], timeout=30)
        remove_network()
        if SLURM_ROOT:
            remove_root_mounts(SLURM_ROOT)
        if SLURM_VERSION == DEFAULT_SLURM_VERSION:
            unlink_system_slurm_conf()
        for pid_file in layout.run.glob("*.pid") if layout.run.is_dir() else []:
            pid_file.unlink(missing_ok=True)
        (layout.run / "config.sha").unlink(missing_ok=True)
        if purge and layout.root.exists():
            inside = [m for m in mount_points() if is_within(m, str(layout.root))]
            if inside:
                raise SandboxError(f"not removing {layout.root}: still mounted there: {', '.join(inside)}")
            shutil.rmtree(layout.root)
            log(f"removed {layout.root}")
    log("down")
    return 0


def is_healthy(layout: Layout, nodes: list[Node], quiet: bool) -> bool:
    problems = []
    for daemon in ["munged", "mariadbd", "slurmdbd", *slurm_daemon_names(nodes)]:
        pid = daemon_pid(layout, daemon)
        if not quiet:
            print(f"  {daemon:<14} {'running pid ' + str(pid) if pid else 'NOT RUNNING'}")
        if not pid:
            problems.append(f"{daemon} not running")
    if not link_exists(BRIDGE):
        problems.append(f"bridge {BRIDGE} missing")
    if SLURM_ROOT:
        problems += [f"{path} not bound into {SLURM_ROOT}" for path in missing_root_binds(SLURM_ROOT, layout)]
    namespaces = set(netns_list())
    problems += [f"namespace {n.netns} missing" for n in nodes if n.netns not in namespaces]
    if not problems:
        problems += fabric_problems(nodes)
    if not problems:
        states = node_states(layout)
        problems += [f"node {n.name} is {states.get(n.name, 'unknown')}" for n in nodes
                     if states.get(n.name) not in HEALTHY_NODE_STATES]
        fingerprint_file = layout.run / "config.sha"
        running = fingerprint_file.read_text().strip() if fingerprint_file.exists() else None
        if running != config_fingerprint(layout, nodes):
            problems.append("the running configuration differs from the one this version generates")
    if not quiet:
        for problem in problems:
            print(f"  problem: {problem}")
    return not problems


def up_command() -> str:
    """The command that brings this version's sandbox up, for messages."""
    version = "" if SLURM_VERSION == DEFAULT_SLURM_VERSION else f" --slurm-version {SLURM_VERSION}"
    return f"tools/slurm_sandbox.py up{version}"


def cmd_status(layout: Layout) -> int:
    node_count = configured_nodes(layout)
    if node_count is None:
        print(f"no sandbox in {layout.root} (run: {up_command()})")
        return 1
    nodes = make_nodes(node_count)
    print(f"state dir {layout.root}, {node_count} nodes, SLURM_CONF={layout.slurm_conf}")
    if SLURM_ROOT:
        print(f"Slurm {SLURM_VERSION} from {SLURM_ROOT}: {len(root_mounts(SLURM_ROOT))} folders bound into it")
    print("daemons:")
    healthy = is_healthy(layout, nodes, quiet=False)
    print("nodes:")
    for node in nodes:
        print(f"  {node.name:<4} {node.ip:<12} netns {node.netns}  fabric {FABRIC_INTERFACE} {node.fabric_ip:<12} "
              f"link {node.fabric_veth} {fabric_link_state(node)}")
    if daemon_pid(layout, "slurmctld"):
        env = slurm_env(layout)
        print(run_command(["sinfo"], check=False, env=env, timeout=20).stdout.rstrip())
    print("healthy" if healthy else f"NOT healthy (run: {up_command()})")
    return 0 if healthy else 1


def cmd_run(layout: Layout, node_name: str, command: list[str]) -> int:
    require_root_and_programs()
    if not command:
        raise SandboxError("run: give a command after `--`, e.g. tools/slurm_sandbox.py run -- hostname")
    pid = daemon_pid(layout, f"slurmd-{node_name}")
    if not pid:
        raise SandboxError(f"node {node_name} is not running (run: {up_command()})")
    env = slurm_env(layout)
    enter = ["nsenter", "-t", str(pid), "-n", "-u", "-m", "--"]
    if SLURM_ROOT:
        # Inside the root as the node's jobs are (chroot, like slurmd: `nsenter -r` left torch's MKL unable to load
        # its libraries here), in this working directory where the root has it.
        enter += ["chroot", str(SLURM_ROOT), "/bin/sh", "-c", 'cd "$1" 2>/dev/null || cd /; shift; exec "$@"', "sh",
                  os.getcwd()]
    return subprocess.call([*enter, *command], env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slurm_sandbox.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", default=None,
                        help="where configs, logs, databases and shared/ live (env BEAM_SANDBOX_DIR; for 24.11 "
                             "BEAM_SANDBOX_2411_DIR)")
    version = argparse.ArgumentParser(add_help=False)
    version.add_argument("--slurm-version", choices=sorted(SLURM_VERSIONS), default=DEFAULT_SLURM_VERSION,
                         help=f"the cluster of this Slurm version (default {DEFAULT_SLURM_VERSION}, this machine's)")
    sub = parser.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="start or repair the sandbox", parents=[version])
    up.add_argument("--nodes", type=int, default=None, help="number of nodes (default: as before, else 4)")
    sub.add_parser("status", help="report daemons and nodes; exit 0 if healthy", parents=[version])
    down = sub.add_parser("down", help="stop everything and remove namespaces", parents=[version])
    down.add_argument("--purge", action="store_true", help="also delete the state dir (accounting DB, logs)")
    sub.add_parser("env", help="print export lines: SLURM_CONF, BEAM_SANDBOX_SHARED (and PATH for 24.11)",
                   parents=[version])
    run = sub.add_parser("run", help="run a command inside a node's namespaces", parents=[version])
    run.add_argument("--node", default="n1")
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    selected = select_version(args.slurm_version)
    state_dir = args.state_dir or os.environ.get(selected.state_dir_env, selected.default_state_dir)
    layout = Layout(Path(state_dir).absolute())
    try:
        if args.verb == "up":
            return cmd_up(layout, args.nodes)
        if args.verb == "down":
            return cmd_down(layout, args.purge)
        if args.verb == "status":
            return cmd_status(layout)
        if args.verb == "env":
            print_env_hint(layout)
            return 0
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return cmd_run(layout, args.node, command)
    except SandboxError as exc:
        print(f"slurm-sandbox: error: {exc}", file=sys.stderr)
        setup = ("must run as root", "missing Debian packages", "root is missing")
        return 2 if any(text in str(exc) for text in setup) else 1


if __name__ == "__main__":
    sys.exit(main())
