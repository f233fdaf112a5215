"""A job's Ray on nodes it shares with another user (the sandbox; a second local user, uid 1001, made here): the
temp-folder squat, the job's folders while it runs, its listeners, a link planted in its Ray logs, and a path with a
quote. Each node's /tmp is its own folder here (`Layout.node_tmp`), as a second tenant of a shared node sees it.
The job is the driver double of tests/ray_cluster (the GPU trainer is not the subject)."""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FINAL_JOB_STATES
from ray_processes import ray_left_running
from test_ray_on_sandbox import DOUBLE, PYTHON, job_keys, output, wait_for

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[3]
TOOL = REPO / "tools" / "slurm_sandbox.py"
OTHER_UID = 1001
OTHER_PYTHON = "/usr/bin/python3"  # the checkout's venv lives under /root, out of the other user's reach
TWO_NODES = "--nodes=2 --ntasks-per-node=1 --gpus-per-node=4 --cpus-per-task=4 --mem=1500 --time=10"


@pytest.fixture(scope="module")
def other_user() -> int:
    """uid 1001, a second local user of every node (made once, kept: lanes may use it side by side)."""
    try:
        pwd.getpwuid(OTHER_UID)
    except KeyError:
        done = subprocess.run(["useradd", "-u", str(OTHER_UID), "-M", "-N", "-s", "/usr/sbin/nologin", "beam-other"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode in (0, 4, 9), done.stderr  # 4, 9: made meanwhile by another lane
    return OTHER_UID


def node_tmp(sandbox, node: str) -> Path:
    """The folder mounted on the node's /tmp."""
    return sandbox.state_dir / "nodes" / node / "tmp"


def as_other(code: str, *args: str, node: str | None = None) -> subprocess.CompletedProcess:
    """Python `code` run as uid 1001 (inside `node`'s namespaces when given, else on the host)."""
    command = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", OTHER_PYTHON, "-c", code,
               *args]
    if node:
        command = [sys.executable, str(TOOL), "run", "--node", node, "--", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def in_node(node: str, *command: str) -> str:
    done = subprocess.run([sys.executable, str(TOOL), "run", "--node", node, "--", *command], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def held_job_script(work: Path, options: str, hold: Path, extra: str = "") -> str:
    """A job whose driver waits (up to 240 s) until the test adds a second file to `hold`."""
    return f"""#!/bin/bash
#SBATCH {options}
#SBATCH --output={work}/slurm-%j.out
export CKPT_PATH={work}/ckpt BEAM_SLURM_STATE_DIR={work}/state
exec {PYTHON} -m beam_slurm.jobs.training.train_job {job_keys(work)} --no-preflight cluster.max_requeues=0 \\
    megatron.expert_parallel=4 rollout.tensor_parallel=4 rollout.pipeline_parallel=1 {extra} \\
    -- {PYTHON} {DOUBLE} 1 0.1 --rendezvous {hold} 2
"""


def job_nodes(sandbox, job: str) -> list[str]:
    node_list = sandbox.scontrol_job(job).get("NodeList", "")
    return subprocess.run(["scontrol", "show", "hostnames", node_list], capture_output=True, text=True,
                          env=sandbox.env(), timeout=30, check=True).stdout.split()


def job_folders(sandbox, node: str, job: str) -> list[Path]:
    """This job's folders in the node's /tmp (its own: a random suffix after ray-<job>-<attempt>-)."""
    return sorted(node_tmp(sandbox, node).glob(f"ray-{job}-0-*"))


def release(hold: Path) -> None:
    (hold / "test").write_text("go")


def ended(sandbox, job: str) -> bool:
    states = [row["State"].split()[0] for row in sandbox.sacct(job, allocations_only=True)]
    return bool(states) and all(state in FINAL_JOB_STATES for state in states)


def wait_running(sandbox, work: Path, job: str, hold: Path) -> dict:
    """Until the driver runs (it wrote its file to `hold`); the head's record."""
    wait_for(lambda: (hold / job).exists() or ended(sandbox, job), 200, f"the driver of job {job}")
    assert (hold / job).exists(), output(work, job)
    return json.loads((work / "logs" / f"{job}-0" / "ray_head.json").read_text())


def test_temp_folders_squatted_for_the_next_job_ids_are_refused_and_nothing_is_written_through_them(
        slurm_sandbox, other_user):
    """The second attack: uid 1001 makes `ray-<id>-0` folders on every node for the next job ids, each holding a
    symlink `beam-ray.pgid` to a file of the job's user (and `ray-<id>-1` as a symlink). The job never uses them,
    writes nothing through them, says on each node what it refused, and leaves no folder of its own behind."""
    sandbox = slurm_sandbox
    work = sandbox.new_dir("squat")
    hold = work / "hold"
    hold.mkdir()
    release(hold)  # nothing to inspect while it runs: the driver goes on at once
    first, second = sandbox.nodes[:2]
    probe = sandbox.sbatch("#!/bin/bash\ntrue\n", f"--nodelist={first}", "--time=1", "--output=/dev/null")
    victim = work / "victim.txt"
    victim.write_text("the job user's own file\n")
    victim.chmod(0o644)
    before = victim.stat()
    planted = range(int(probe) + 1, int(probe) + 21)
    plant = ("import os, sys\n"
             "root, victim = sys.argv[1], sys.argv[2]\n"
             "for job in sys.argv[3:]:\n"
             "    folder = os.path.join(root, f'ray-{job}-0')\n"
             "    os.mkdir(folder); os.chmod(folder, 0o777)\n"
             "    os.symlink(victim, os.path.join(folder, 'beam-ray.pgid'))\n"
             "    os.mkdir(os.path.join(folder, 'ray'))\n"
             "    os.symlink(folder, os.path.join(root, f'ray-{job}-1'))\n")
    try:
        for node in (first, second):
            done = as_other(plant, str(node_tmp(sandbox, node)), str(victim), *map(str, planted))
            assert done.returncode == 0, done.stderr
        job = sandbox.sbatch(held_job_script(work, f"{TWO_NODES} --nodelist={first},{second}", hold))
        assert int(job) in planted, f"job {job} came after the planted ids {planted.start}..{planted.stop - 1}"
        state = sandbox.wait(job, timeout=220)
        out = output(work, job)
        assert state == "COMPLETED", out[-5000:]
        assert victim.read_text() == "the job user's own file\n" and victim.stat().st_mtime == before.st_mtime
        assert victim.stat().st_uid == 0 and stat.S_IMODE(victim.stat().st_mode) == 0o644
        for node in (first, second):
            tmp = node_tmp(sandbox, node)
            squat = tmp / f"ray-{job}-0"
            assert sorted(p.name for p in squat.iterdir()) == ["beam-ray.pgid", "ray"], "nothing added to the squat"
            assert list((squat / "ray").iterdir()) == [], "Ray never ran in the squatted folder"
            said = [line for line in out.splitlines() if f"[ray-node {node} " in line and "refused" in line]
            assert any(f"refused /tmp/ray-{job}-0: it belongs to uid {OTHER_UID}" in line for line in said), said
            assert any(f"refused /tmp/ray-{job}-1: it is a symlink" in line for line in said), said
            assert job_folders(sandbox, node, job) == [], "the job's own folder is removed at the attempt's end"
        assert re.search(rf"temp dir /tmp/ray-{job}-0-[a-z0-9]{{6}}/r\)", out), out[-3000:]
        assert not ray_left_running(job)
    finally:  # the squat for ids later tests will get
        for node in (first, second):
            for job_id in planted:
                for name in (f"ray-{job_id}-1", f"ray-{job_id}-0"):
                    path = node_tmp(sandbox, node) / name
                    if path.is_symlink():
                        path.unlink()
                    elif path.is_dir():
                        shutil.rmtree(path)


def test_while_the_job_runs_its_folders_are_closed_to_others_and_a_link_in_its_logs_is_not_copied(
        slurm_sandbox, other_user):
    """The first attack's ground: Ray's temp folder and every folder below it are out of uid 1001's reach while the
    job runs. Then a symlink to the job's token and a folder of uid 1001's, planted in the job's Ray logs (as root:
    no other user can get in any more), are not copied to the shared log folder, and the job's log names them."""
    sandbox = slurm_sandbox
    work = sandbox.new_dir("closed")
    hold = work / "hold"
    hold.mkdir()
    job = sandbox.sbatch(held_job_script(work, TWO_NODES, hold, "cluster.log_copy_interval_s=3"))
    try:
        record = wait_running(sandbox, work, job, hold)
        nodes = job_nodes(sandbox, job)
        token = work / "state" / "jobs" / job / "ray_auth_token"
        secret = token.read_text().strip()
        for node in nodes:
            [folder] = job_folders(sandbox, node, job)
            info = os.lstat(folder)
            assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == 0, oct(info.st_mode)
            assert record["temp_dir"].startswith(f"/tmp/ray-{job}-0-") if node == record["host"] else True
            inside = [p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink()]
            assert any(p.name == "logs" for p in inside) and any(p.name.startswith("session_") for p in inside)
            # uid 1001, inside the node: no folder of the job's can be listed or written, from /tmp down.
            tried = as_other(
                "import os, sys\n"
                "for path in sys.argv[1:]:\n"
                "    for what, act in (('write', lambda: os.close(os.open(os.path.join(path, 'planted'),"
                " os.O_WRONLY | os.O_CREAT, 0o644))), ('list', lambda: os.listdir(path))):\n"
                "        try:\n"
                "            act(); print('ALLOWED', what, path)\n"
                "        except OSError as exc:\n"
                "            print('refused', what, path, exc.errno)\n",
                *[str(p).replace(str(node_tmp(sandbox, node)), "/tmp") for p in [folder, *inside]], node=node)
            assert tried.returncode == 0, tried.stderr
            assert "ALLOWED" not in tried.stdout, tried.stdout
            assert tried.stdout.count("refused") == 2 * (1 + len(inside)), tried.stdout
        # A link to the token and a folder of uid 1001's, in the head's Ray logs.
        head_logs = next(p for p in job_folders(sandbox, record["host"], job)[0].glob("r/session_2*/logs"))
        (head_logs / "zz-planted.log").symlink_to(token)
        (head_logs / "zz-theirs").mkdir()
        (head_logs / "zz-theirs" / "a.log").write_text(secret)
        os.chown(head_logs / "zz-theirs", OTHER_UID, OTHER_UID)
        time.sleep(5)  # a periodic copy (every 3 s here) meets them
    finally:
        release(hold)
    state = sandbox.wait(job, timeout=200)
    out = output(work, job)
    assert state == "COMPLETED", out[-5000:]
    copies = work / "logs" / f"{job}-0" / "ray"
    copied = [p for p in copies.rglob("*") if p.is_file()]
    assert any(p.name == "raylet.out" for p in copied), "the copy ran"
    assert not [p for p in copied if "zz-" in str(p)], "nothing planted reached the shared log folder"
    assert not any(secret in p.read_text(errors="replace") for p in copied), "the token never reaches the copy"
    head = record["host"]
    assert re.search(rf"\[ray-node {head} .*Ray log copy: skipped session_\S+/zz-planted.log: not a regular file "
                     r"\(a symlink\)", out), out[-4000:]
    assert re.search(rf"\[ray-node {head} .*Ray log copy: skipped session_\S+/zz-theirs/: belongs to uid "
                     rf"{OTHER_UID}", out), out[-4000:]
    for path in copies.rglob("*"):  # the README: copies follow the user's umask (022 here), not the sources' modes
        assert stat.S_IMODE(path.stat().st_mode) & 0o022 == 0, (path, oct(path.stat().st_mode))
    for node in job_nodes(sandbox, job):
        assert job_folders(sandbox, node, job) == [], f"{node}: the job's folder is removed after the copy"


LISTENER = re.compile(r"^LISTEN\s+\d+\s+\d+\s+(?P<address>\S+):(?P<port>\d+)\s+\S+\s+users:\((?P<users>.*)\)$")


SLURM_OWN = {"srun", "slurmstepd"}
"""Slurm's processes of the job (srun listens for its steps' I/O): Slurm's ports, not the job's Ray's."""


def job_listeners(node: str, job: str) -> list[tuple[str, int, str]]:
    """(address, port, process) of every TCP listener on `node` of a process of this job (Slurm's own aside)."""
    found = []
    for line in in_node(node, "ss", "-ltnpH").splitlines():
        match = LISTENER.match(line.strip())
        if not match:
            continue
        for name, pid in re.findall(r'\("([^"]*)",pid=(\d+)', match["users"]):
            if name in SLURM_OWN:
                continue
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"SLURM_JOB_ID={job}".encode() in environ:
                found.append((match["address"].strip("[]"), int(match["port"]), name))
                break
    return found


def test_every_listener_of_the_job_is_in_its_block_and_none_on_the_wildcard_answers_without_the_token(
        slurm_sandbox, other_user):
    """`ss -ltnp` in each node's namespace, for the job's processes: every port in the job's block (the autoscaler's
    and dashboard's metrics too, Ray's fixed 44217 and 44227 before); the metrics servers on the node's address; on
    the wildcard only Ray's gRPC servers, which take no plain request (an HTTP GET from another node gets nothing)."""
    sandbox = slurm_sandbox
    work = sandbox.new_dir("ports")
    hold = work / "hold"
    hold.mkdir()
    job = sandbox.sbatch(held_job_script(work, TWO_NODES, hold))
    try:
        record = wait_running(sandbox, work, job, hold)
        nodes = job_nodes(sandbox, job)
        ports = record["ports"]
        assert {"autoscaler_metrics", "dashboard_metrics", "metrics_export"} <= set(ports), ports
        per_node = {}
        for node in nodes:
            bringup = json.loads((work / "logs" / f"{job}-0" / "bringup" / f"{node}.json").read_text())
            mine = bringup["ports"]
            base = mine["node_manager"] - 3  # the block's first port (ray.ports_per_job=400 by default)
            block = range(base, base + 400)
            listeners = wait_for(lambda: job_listeners(node, job), 30, f"listeners of job {job} on {node}")
            per_node[node] = listeners
            outside = [entry for entry in listeners if entry[1] not in block]
            assert not outside, f"{node}: listeners outside the block {base}-{base + 399}: {outside}"
            assert not [entry for entry in listeners if entry[1] in (44217, 44227)]
            ip = sandbox.node_ips[node]
            metrics = {mine[name] for name in ("metrics_export", "autoscaler_metrics", "dashboard_metrics")
                       if name in mine}
            for address, port, name in listeners:
                if port in metrics:
                    assert address == ip, f"{node}: metrics port {port} ({name}) on {address}, not {ip}"
            grpc = {mine[name] for name in ("gcs", "node_manager", "object_manager", "dashboard_agent_grpc")
                    if name in mine}
            wildcard = [(port, name) for address, port, name in listeners if address in ("0.0.0.0", "*", "::")]
            assert {port for port, _ in wildcard} - grpc - set(range(mine["min_worker"], mine["max_worker"] + 1)) \
                == set(), f"{node}: wildcard listeners besides Ray's gRPC servers: {wildcard}"
            if node == record["host"]:
                assert (ip, ports["autoscaler_metrics"]) in {(a, p) for a, p, _ in listeners}
                assert (ip, ports["dashboard_metrics"]) in {(a, p) for a, p, _ in listeners}
                assert ("127.0.0.1", ports["dashboard"]) in {(a, p) for a, p, _ in listeners}
            # From the other node, as uid 1001: every wildcard listener, asked over plain HTTP, answers nothing.
            other = next(n for n in nodes if n != node)
            asked = as_other(
                "import socket, sys\n"
                "for port in map(int, sys.argv[2:]):\n"
                "    try:\n"
                "        with socket.create_connection((sys.argv[1], port), timeout=3) as s:\n"
                "            s.settimeout(3); s.sendall(b'GET /metrics HTTP/1.0\\r\\n\\r\\n')\n"
                "            data = s.recv(4096)\n"
                "    except OSError:\n"
                "        data = b''\n"
                "    print(port, 'ANSWERED' if data.startswith(b'HTTP/1') and b' 200 ' in data[:20] else 'nothing')\n",
                ip, *[str(port) for port, _ in wildcard], node=other)
            assert asked.returncode == 0, asked.stderr
            assert "ANSWERED" not in asked.stdout, asked.stdout
    finally:
        release(hold)
    assert sandbox.wait(job, timeout=200) == "COMPLETED", output(work, job)[-5000:]


def test_a_checkpoint_path_with_a_quote_is_passed_on_and_the_run_ends(slurm_sandbox):
    """`submit` with CKPT_PATH and EXPORT_PATH holding a single quote: before, submit said yes (exit 0) and the job
    failed a second later on its own arguments. Now the job's parser reads the paths back (submit checks it with the
    same parser) and the run ends with its checkpoint in the quoted folder."""
    sandbox = slurm_sandbox
    work = sandbox.new_dir("quote")
    run = work / "o'brien's run"
    for sub in ("model", "data"):
        (work / sub).mkdir()
    for name in ("dapo-math-17k-cleaned", "aime-2025-cleaned", "aime-2024-cleaned"):
        (work / "data" / f"{name}.parquet").touch()  # the rehearsal reads none; preflight checks they are there
    env = sandbox.env({"CKPT_PATH": f"{run}/ckpt", "EXPORT_PATH": f"{run}/export", "MODEL_PATH": f"{work}/model",
                       "DATA_DIR": f"{work}/data", "HOME": str(work), "BEAM_SLURM_STATE_DIR": f"{work}/state",
                       "BEAM_REHEARSAL_STEP_SECONDS": "0.5", "SBATCH_MEM_PER_NODE": "1500M"})
    for name in ("BEAM_SLURM_HOME", "BEAM_LOG_DIR", "RUN_NAME", "SKYRL_DIR", "BEAM_CONTAINER_IMAGE", "PYTHONPATH",
                 "MAX_TRAINING_STEPS", "CKPT_INTERVAL", "RESUME_MODE", "BEAM_TRAINER_BACKEND"):
        env.pop(name, None)
    done = subprocess.run(
        [PYTHON, "-m", "beam_slurm.cli", "submit", "--stages", "train", "recipe=lora_16gpu",
         "trainer.backend=rehearsal", "max_training_steps=2", "checkpoint.interval=2", "cluster.time_limit=00:10:00",
         "cluster.signal_before_s=120", "cluster.grace_s=30", "cluster.check_paths_on_submit=false",
         f"cluster.partition={sandbox.partition('batch')}", "cluster.fabric_check=false", "cluster.storage_probe_s=0",
         "ray.include_dashboard=false"],
        cwd=work, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, (done.stdout, done.stderr)
    job = re.search(r"train\s+job (\d+)", done.stdout).group(1)
    sandbox.submitted.append(job)
    state = sandbox.wait(job, timeout=220)
    logs = "\n".join(p.read_text(errors="replace") for p in run.rglob("*.out"))
    assert state == "COMPLETED", (done.stdout, logs[-5000:])
    assert (run / "ckpt" / "latest_ckpt_global_step.txt").read_text().strip() == "2", logs[-3000:]
    assert "cannot parse this override" not in logs and "[rehearsal] training done: 2 steps" in logs, logs[-3000:]
