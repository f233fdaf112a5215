"""Shared pytest fixtures. `slurm_sandbox`: a real multi-node Slurm cluster on this machine (tools/slurm_sandbox.py).

Tests marked `sandbox` are skipped only when not running as root (the sandbox needs network namespaces); when
running as root a sandbox that fails to come up fails those tests, so CI cannot pass without a real cluster.
The sandbox is left running after the session (other sessions may share it); set BEAM_SANDBOX_TEARDOWN=1 to stop
it at the end of a session that started it.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# tests/ mirrors beam_slurm/; what several folders' tests share (inputs, doubles, fixtures) lives in tests/support,
# importable by name from any test. Its fixture modules are plugins of this conftest.
sys.path.insert(0, str(Path(__file__).with_name("support")))
pytest_plugins = ["evaluation_inputs", "run_env"]
SANDBOX_TOOL = REPO_ROOT / "tools" / "slurm_sandbox.py"
NOT_ROOT_REASON = "the Slurm sandbox needs root (network namespaces, system daemons); run the tests as root"

# sacct states after which a job will not run again (a requeued job goes back to PENDING instead).
FINAL_JOB_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                    "DEADLINE", "REVOKED"}
SACCT_FIELDS = ["JobID", "JobName", "Partition", "State", "ExitCode", "NodeList", "AllocTRES", "Submit", "Start",
                "End", "Elapsed"]


TEST_GROUPS = {
    "sandbox": "every test that uses the sandbox",
    "lanes": "the sandbox tests that run side by side in lanes (not marked whole_cluster)",
    "whole": "the sandbox tests marked whole_cluster (they stop, restart or change the whole sandbox)",
    "semantics": "the sandbox tests marked slurm_semantics (not whole_cluster): run on Slurm 24.11 too",
    "other": "the tests that do not use the sandbox",
}
LANE_TIMES = Path(__file__).with_name("lane_times.json")
"""Seconds each lane test took in a full run (tools/run_tests.sh writes it): the lanes take the longest first."""
UNTIMED_TEST_S = 60.0


def uses_the_sandbox(item) -> bool:
    return "sandbox" in item.keywords or "slurm_sandbox" in item.fixturenames


def in_group(item, group: str) -> bool:
    if group == "other":
        return not uses_the_sandbox(item)
    if not uses_the_sandbox(item):
        return False
    whole = "whole_cluster" in item.keywords
    semantics = "slurm_semantics" in item.keywords and not whole
    return {"sandbox": True, "lanes": not whole, "whole": whole, "semantics": semantics}[group]


def pytest_collection_modifyitems(config, items):
    # tools/run_tests.sh runs the sandbox tests in lanes side by side (pytest-xdist workers), the whole-cluster
    # sandbox tests before them, and the other tests (mostly computing) alongside; BEAM_TEST_GROUP picks one group.
    group = os.environ.get("BEAM_TEST_GROUP", "")
    if group and group not in TEST_GROUPS:
        raise pytest.UsageError(f"BEAM_TEST_GROUP={group!r}: expected one of {', '.join(TEST_GROUPS)} or unset "
                                "(every test)")
    if group:
        keep = [item for item in items if in_group(item, group)]
        dropped = [item for item in items if not in_group(item, group)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    if group == "lanes":
        longest_first(items)
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason=NOT_ROOT_REASON)
    for item in items:
        if "sandbox" in item.keywords:
            item.add_marker(skip)


SHARED_FIXTURE_FILES = {"tests/launch/test_eval_array_sandbox.py", "tests/verbs/test_outages_sandbox.py"}
"""Lane test files whose tests share a module fixture: one lane runs all of them, in their order."""


def lane_scope(nodeid: str) -> str:
    """The unit a lane takes at once: the file for SHARED_FIXTURE_FILES, else the test itself."""
    path = nodeid.split("::", 1)[0]
    return path if path in SHARED_FIXTURE_FILES else nodeid


def longest_first(items) -> None:
    """Order the lane tests by the time they took last (longest first), so the lanes finish together; the tests of
    one scope stay together and in their order. Every xdist worker sorts the same way, as xdist requires."""
    try:
        times = json.loads(LANE_TIMES.read_text())
    except (OSError, ValueError):
        times = {}
    scopes: dict[str, list] = {}
    for item in items:
        scopes.setdefault(lane_scope(item.nodeid), []).append(item)
    cost = {scope: sum(times.get(item.nodeid, UNTIMED_TEST_S) for item in members) for scope, members in scopes.items()}
    items[:] = [item for scope in sorted(scopes, key=lambda k: -cost[k]) for item in scopes[scope]]


def pytest_xdist_make_scheduler(config, log):
    """The lanes' scheduler: xdist's scope scheduling over lane_scope units, in the order collected (longest first);
    each lane holds one unit ahead, the others wait in the queue for the first lane that is free."""
    if os.environ.get("BEAM_TEST_GROUP") != "lanes":
        return None
    from xdist.scheduler import LoadScopeScheduling  # only under xdist

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane_scope(nodeid)

    config.option.loadscopereorder = False
    return LaneScheduling(config, log)


@dataclasses.dataclass
class SlurmSandbox:
    """Handle on the running sandbox cluster, with small helpers around sbatch/sacct for tests."""

    state_dir: Path
    """The sandbox's state dir (configs, logs, accounting DB)."""
    shared_dir: Path
    """A directory every node sees; put job scripts and outputs here (only /tmp is private to a node)."""
    nodes: list[str]
    """Node hostnames, e.g. ["n1", "n2", "n3", "n4"]."""
    node_ips: dict[str, str]
    """Hostname -> address on the sandbox bridge."""
    partitions: dict[str, str]
    """Kind -> this session's partition name: batch (default, never preempted), low (preemptable, REQUEUE), high
    (preempts low). In a lane these are the lane's own (`lane2-low`); use `partition("low")` in tests."""
    slurm_conf: Path
    """slurm.conf of the sandbox; exported as SLURM_CONF for the whole test session."""
    gpus_per_node: int = 8
    """Fake GPUs (GRES gpu) per node; jobs see CUDA_VISIBLE_DEVICES=0..7."""
    submitted: list[str] = dataclasses.field(default_factory=list)
    """Job ids submitted through sbatch(); those still queued or running are cancelled when the session ends."""
    lane: int | None = None
    """The lane (1-based) whose nodes and partitions this session uses, or None for the whole sandbox."""
    slurm_version: str = "22.05"
    """The sandbox's Slurm version (BEAM_SANDBOX_SLURM_VERSION): "22.05" or "24.11"."""

    def partition(self, kind: str) -> str:
        """This session's partition of one kind ("batch", "low" or "high")."""
        return self.partitions[kind]

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for Slurm client commands (and, with sbatch's default --export=ALL, for the job)."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf)
        if "/usr/bin" not in env.get("PATH", "").split(os.pathsep):
            env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/bin"
        # Jobs' private folders live in the sandbox, so `down --purge` (which restarts the job ids) takes them too.
        env.setdefault("BEAM_SLURM_STATE_DIR", str(self.shared_dir / "beam-state"))
        env.update(extra or {})
        return env

    def new_dir(self, prefix: str = "test") -> Path:
        """A fresh directory under shared_dir for one test's scripts and outputs."""
        path = self.shared_dir / "tests" / f"{prefix}-{uuid.uuid4().hex[:10]}"
        path.mkdir(parents=True)
        return path

    def sbatch(self, script: str | os.PathLike, *args: str, env: dict[str, str] | None = None) -> str:
        """Submit a batch script (a path, or the script text itself) and return the job id.

        args go to sbatch before the script (e.g. "-N2", "--gres=gpu:8"); env adds or overrides variables.
        """
        if isinstance(script, str) and ("\n" in script or script.startswith("#!")):
            # Named after the running test, so squeue/sacct show which test a job belongs to.
            current = os.environ.get("PYTEST_CURRENT_TEST", "job").split("::")[-1].split(" ")[0]
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", current)[:40] or "job"
            path = self.new_dir(name) / f"{name}.sh"
            path.write_text(script)
            path.chmod(0o755)
        else:
            path = Path(script)
        # A test's own job, submitted again when sbatch got no answer (seen once at the lanes' busiest start: exit
        # without a word while slurmctld logged "Zero Bytes were transmitted or received") and Slurm shows no job of
        # that script; a refusal Slurm itself worded is raised at once.
        for attempt in range(3):
            proc = subprocess.run(["sbatch", "--parsable", *args, str(path)], capture_output=True, text=True,
                                  env=self.env(env), timeout=60)
            unanswered = proc.returncode != 0 and (not proc.stderr.strip() or _NO_ANSWER.search(proc.stderr))
            if not unanswered or attempt == 2 or self._queued_from(path):
                break
            time.sleep(2)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch {shlex.join(args)} {path} failed (exit {proc.returncode}, attempt "
                               f"{attempt + 1}): {proc.stderr.strip()}")
        job_id = proc.stdout.strip().split(";")[0]
        self.submitted.append(job_id)
        return job_id

    def _queued_from(self, path: Path) -> bool:
        """Whether Slurm has a job of this batch script (its command), so a second sbatch would run it twice."""
        proc = subprocess.run(["squeue", "--noheader", "--states=all", "-o", "%o"], capture_output=True, text=True,
                              env=self.env(), timeout=60)
        return proc.returncode != 0 or str(path) in proc.stdout.split()

    def sacct(self, job_id: str, allocations_only: bool = False) -> list[dict[str, str]]:
        """Accounting rows of a job (one per allocation and step), as dicts keyed by SACCT_FIELDS."""
        args = ["sacct", "-j", str(job_id), "-n", "-P", "-o", ",".join(SACCT_FIELDS)]
        if allocations_only:
            args.append("-X")
        proc = subprocess.run(args, capture_output=True, text=True, env=self.env(), timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"sacct -j {job_id} failed: {proc.stderr.strip()}")
        return [dict(zip(SACCT_FIELDS, line.split("|"))) for line in proc.stdout.splitlines() if line]

    def scontrol_job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, RestartCnt, Reason, NodeList, ...); empty once Slurm forgot it."""
        proc = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True,
                              env=self.env(), timeout=60)
        if proc.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", proc.stdout.splitlines()[0] if proc.stdout else ""))

    def wait(self, job_id: str, timeout: float = 120) -> str:
        """Wait until the job has ended for good and return its final sacct state (e.g. "COMPLETED").

        For a job array, all tasks must end; the result is COMPLETED only if every task completed, else the first
        other state. On timeout, raises TimeoutError with the job's scontrol record.
        """
        deadline = time.monotonic() + timeout
        interval = 0.2
        while True:
            # A job Slurm resized (--no-kill, a node removed) keeps a RESIZING record of its part before.
            states = [row["State"].split()[0] for row in self.sacct(job_id, allocations_only=True)
                      if row["State"] != "RESIZING"]
            if states and all(state in FINAL_JOB_STATES for state in states):
                return next((state for state in states if state != "COMPLETED"), "COMPLETED")
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not finished after {timeout:.0f} s; sacct states {states}; "
                                   f"scontrol: {self.scontrol_job(job_id)}")
            time.sleep(interval)
            interval = min(interval * 1.5, 2.0)

    def idle_nodes(self) -> list[str]:
        """Nodes with nothing running right now (other test sessions may share the sandbox)."""
        proc = subprocess.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], capture_output=True, text=True,
                              env=self.env(), timeout=60)
        idle = set(proc.stdout.split())
        return [node for node in self.nodes if node in idle]

    def cancel(self, job_id: str) -> None:
        """scancel the job (no error if it already ended)."""
        subprocess.run(["scancel", str(job_id)], capture_output=True, env=self.env(), timeout=60)


_NO_ANSWER = re.compile(r"timed out|Zero Bytes|Unable to contact|Connection refused", re.I)


def _load_sandbox_tool():
    """tools/slurm_sandbox.py as a module (tools/ is not a package), for its layout and constants."""
    if "slurm_sandbox_tool" in sys.modules:
        return sys.modules["slurm_sandbox_tool"]
    spec = importlib.util.spec_from_file_location("slurm_sandbox_tool", SANDBOX_TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["slurm_sandbox_tool"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


SLURM_VERSION_ENV = "BEAM_SANDBOX_SLURM_VERSION"
"""The Slurm version of the sandbox the `slurm_sandbox` fixture uses (22.05 unless set: tools/run_tests.sh sets 24.11
for its group of the Slurm-semantics tests)."""


def sandbox_slurm_version() -> str:
    return os.environ.get(SLURM_VERSION_ENV) or "22.05"


def _sandbox_command(*args: str) -> subprocess.CompletedProcess:
    """tools/slurm_sandbox.py VERB [args] for this session's Slurm version."""
    verb, rest = args[0], list(args[1:])
    argv = [sys.executable, str(SANDBOX_TOOL), verb, "--slurm-version", sandbox_slurm_version(), *rest]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


@pytest.fixture
def log_lines(caplog):
    """The messages the package logs (INFO and up) while the test runs, as a list that grows as they come."""
    caplog.set_level(logging.INFO, logger="beam_slurm")
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("beam_slurm").addHandler(handler)
    yield lines
    logging.getLogger("beam_slurm").removeHandler(handler)


@pytest.fixture(autouse=True)
def no_slurm_outside_the_sandbox(request, monkeypatch, tmp_path_factory):
    """Tests that do not use the sandbox see no Slurm, as on a laptop, whether or not the sandbox is up: scontrol
    then fails at once (SLURM_CONF names an empty file). Without it, where no sandbox runs yet, scontrol looks the
    controller up in DNS (configless) for up to a minute, and `plan` waits its query timeout each time."""
    if uses_the_sandbox(request.node):
        return
    empty = tmp_path_factory.getbasetemp() / "no-slurm.conf"
    empty.touch()
    monkeypatch.setenv("SLURM_CONF", str(empty))


def current_lane() -> int | None:
    """The lane of this pytest process: xdist worker gwN of a run with BEAM_TEST_LANES set is lane N+1; a single
    pytest pinned with BEAM_TEST_LANE=K (side by side with others on one sandbox) is lane K."""
    if os.environ.get("BEAM_TEST_LANE", "").isdigit():
        return int(os.environ["BEAM_TEST_LANE"])
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not os.environ.get("BEAM_TEST_LANES") or not worker.startswith("gw"):
        return None
    return int(worker[2:]) + 1


@pytest.fixture(autouse=True)
def lane_of_the_test(request):
    """The lane a sandbox test ran in, for the runner's report of the slowest tests (JUnit XML property)."""
    lane = current_lane()
    if lane is not None and uses_the_sandbox(request.node):
        request.getfixturevalue("record_property")("lane", lane)


@pytest.fixture(scope="session")
def slurm_sandbox() -> SlurmSandbox:
    """The running sandbox (brought up, or repaired, if needed). Fails the test if it cannot come up as root.

    In a lane (tools/run_tests.sh) the session sees only its lane's nodes and partitions, and a job that names no
    partition goes to the lane's `batch` (BEAM_SANDBOX_LANE, read by the sandbox's sbatch filter; jobs pass it on to
    the jobs they submit), while any partition a job names (command line, SBATCH_PARTITION, header) still wins."""
    if os.geteuid() != 0:
        pytest.skip(NOT_ROOT_REASON)
    if sandbox_slurm_version() != "22.05":
        tool = _load_sandbox_tool()
        with tool.selected_version(sandbox_slurm_version()):
            missing = not tool.host_is_debian_13() and tool.root_problem(tool.SLURM_2411_ROOT)
        if missing:
            pytest.skip(f"{SLURM_VERSION_ENV}={sandbox_slurm_version()}: no root at {tool.SLURM_2411_ROOT}: build it "
                        f"with `{tool.ROOT_BUILD_COMMAND}`")
    was_up = _sandbox_command("status").returncode == 0
    wanted = os.environ.get("BEAM_SANDBOX_NODES")
    proc = _sandbox_command("up", *(["--nodes", wanted] if wanted else []))
    if proc.returncode != 0:
        pytest.fail(f"Slurm sandbox did not come up:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    tool = _load_sandbox_tool()
    version = tool.select_version(sandbox_slurm_version())
    layout = tool.Layout(Path(os.environ.get(version.state_dir_env, version.default_state_dir)).absolute())
    nodes = tool.make_nodes(tool.configured_nodes(layout) or 4)
    partitions = {"batch": "batch", "low": "low", "high": "high"}
    lane = current_lane()
    if lane is not None:
        lanes = tool.lanes(nodes)
        if lane > len(lanes):
            pytest.fail(f"lane {lane}: the sandbox has {len(nodes)} nodes, {len(lanes)} lanes of "
                        f"{tool.NODES_PER_LANE}; bring it up with --nodes {lane * tool.NODES_PER_LANE} "
                        "(BEAM_SANDBOX_NODES)", pytrace=False)
        nodes = lanes[lane - 1]
        partitions = {kind: tool.lane_prefix(lane) + kind for kind in partitions}
        os.environ[tool.LANE_ENV] = str(lane)
    sandbox = SlurmSandbox(
        state_dir=layout.root, shared_dir=layout.shared, nodes=[n.name for n in nodes],
        node_ips={n.name: n.ip for n in nodes}, partitions=partitions, slurm_conf=layout.slurm_conf,
        gpus_per_node=tool.GPUS_PER_NODE, lane=lane, slurm_version=version.name)
    # Code under test calls sbatch/sacct itself; let it find the sandbox (and, for 24.11, that version's commands).
    os.environ["SLURM_CONF"] = str(layout.slurm_conf)
    if version.name != tool.DEFAULT_SLURM_VERSION:
        env_lines = _sandbox_command("env").stdout.splitlines()
        exported = dict(line.removeprefix("export ").partition("=")[::2] for line in env_lines if "=" in line)
        os.environ["PATH"] = shlex.split(exported["PATH"])[0]
    yield sandbox
    if sandbox.submitted:
        # A failed test must not leave jobs that hold nodes for the next session.
        subprocess.run(["scancel", *sandbox.submitted], capture_output=True, env=sandbox.env(), timeout=60)
    if os.environ.get("BEAM_SANDBOX_TEARDOWN") == "1" and not was_up:
        _sandbox_command("down")
