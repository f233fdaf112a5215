"""Unit tests of the pieces that need no cluster: ports, auth token, rank/context logic, GPU comparison, settings."""
from __future__ import annotations

import os
import socket
import stat

import pytest

from beam_slurm.config.ports import PORT_NAMES, block_count, choose_ports, first_block, port_is_free, ports_for_block
from beam_slurm.config.ray import RaySettings
from beam_slurm.core.errors import ConfigError
from beam_slurm.core.ray_records import NodeFailure
from beam_slurm.jobs.ray_cluster import auth
from beam_slurm.jobs.ray_cluster.context import NodeContext
from beam_slurm.jobs.ray_cluster.gpus import allocated_gpus, compare_gpu_view


def test_blocks_are_disjoint_and_below_the_ephemeral_range():
    settings = RaySettings()
    seen: set[int] = set()
    for block in range(block_count(settings)):
        ports = ports_for_block(block, settings)
        mine = set(ports.all_ports(head=True))
        assert not (mine & seen), f"block {block} overlaps an earlier block"
        seen |= mine
        assert ports.max_worker < settings.port_range_end <= 32768
        assert ports.min_worker - ports.gcs == 16 and ports.max_worker - ports.min_worker + 1 == settings.ports_per_job - 16


def test_job_id_picks_the_block_and_neighbours_differ():
    settings = RaySettings()
    assert first_block(1234, settings) == 1234 % block_count(settings)
    assert ports_for_block(first_block(7, settings), settings).gcs != ports_for_block(first_block(8, settings), settings).gcs


def test_busy_block_falls_back_to_the_next_free_one():
    settings = RaySettings()
    job = 3
    taken = set(ports_for_block(first_block(job, settings), settings).all_ports(head=True))
    ports = choose_ports(settings, job, head=True, is_free=lambda p: p not in taken)
    assert ports.block == first_block(job, settings) + 1


def test_real_listener_moves_the_job_to_another_block():
    settings = RaySettings(port_range_start=23000, port_range_end=24000, ports_per_job=100)
    first = ports_for_block(first_block(5, settings), settings)
    with socket.socket() as listener:
        listener.bind(("", first.node_manager))
        listener.listen()
        assert not port_is_free(first.node_manager)
        chosen = choose_ports(settings, 5, head=False)
    assert chosen.block != first.block and first.node_manager not in chosen.all_ports(head=False)


def test_no_free_block_is_a_clear_error():
    settings = RaySettings(port_range_start=23000, port_range_end=23100, ports_per_job=50)
    with pytest.raises(RuntimeError, match="widen ray.port_range"):
        choose_ports(settings, 1, head=True, is_free=lambda p: False)


def test_every_port_can_be_overridden():
    overrides = {name: 40000 + i for i, name in enumerate(PORT_NAMES)}
    overrides["max_worker"] = 40100
    ports = ports_for_block(0, RaySettings(port_overrides=overrides))
    assert ports.gcs == 40000 and ports.min_worker == overrides["min_worker"] and ports.max_worker == 40100
    args = ports.ray_start_args(head=True)
    assert "--port=40000" in args and "--dashboard-port=40002" in args
    assert not any(a.startswith("--port=") for a in ports.ray_start_args(head=False))


def test_settings_reject_bad_values_by_name():
    with pytest.raises(ConfigError) as err:
        RaySettings(ports_per_job=8, temp_dir_root="relative", port_overrides={"gsc": 1}).validate()
    text = str(err.value)
    assert "ray.ports_per_job" in text and "ray.temp_dir_root" in text and "ray.port_overrides.gsc" in text
    with pytest.raises(ConfigError, match="ray.temp_dir_root"):
        RaySettings(temp_dir_root="/" + "x" * 60).validate()
    with pytest.raises(ConfigError, match="ray.bogus"):
        RaySettings.from_mapping({"bogus": 1})


def test_the_job_spec_round_trips_through_the_attempt_folder(tmp_path):
    from beam_slurm.config.job_spec import JobSpec, LogCopySettings
    from beam_slurm.core.layout import attempt_dir

    settings = RaySettings(network_interface="ib0", extra_env={"NCCL_SOCKET_IFNAME": "ib0"}, port_overrides={"gcs": 6380})
    spec = JobSpec(ray=settings, gpus_per_node=8, log_copy=LogCopySettings(5.0, 1024, 7.0),
                   env_manifest={"inherit": ["HF_*"], "set": ["CKPT_PATH"], "secret_files": {}}, sigterm_notice=True,
                   job_start_time=1.5, preflight_window=(2.0, 3.0), ray_step_launch_time=4.0)
    spec.write(tmp_path)
    assert JobSpec.read(tmp_path) == spec and JobSpec.read(attempt_dir({"BEAM_ATTEMPT_DIR": str(tmp_path)})) == spec
    assert JobSpec.read(tmp_path / "none") == JobSpec() == JobSpec.read(attempt_dir({}))
    assert JobSpec().ray == RaySettings() and JobSpec().log_copy_settings() == LogCopySettings.schema_defaults()


def test_token_file_is_private_unique_and_reused(tmp_path):
    settings = RaySettings(state_dir=str(tmp_path / "state"))
    path = auth.ensure_token(settings, "42")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert auth.ensure_token(settings, "42").read_text() == token  # requeued attempt: same token
    assert auth.ensure_token(settings, "43").read_text() != token
    assert auth.auth_env(settings, path) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}
    assert auth.auth_env(RaySettings(auth=False), None) == {}
    auth.remove_job_dir(settings, "42")
    assert not path.exists()


def test_a_first_attempt_removes_the_folder_an_earlier_job_with_its_id_left(tmp_path):
    settings = RaySettings(state_dir=str(tmp_path / "state"))
    assert not auth.remove_stale_job_dir(settings, "27")
    old = auth.ensure_token(settings, "27")
    stale_head = old.parent / "rendezvous" / "0.1" / "head.json"
    stale_head.parent.mkdir(parents=True)
    stale_head.write_text('{"address": "10.0.0.9:6379", "block": 3}')
    assert auth.remove_stale_job_dir(settings, "27")
    assert not stale_head.exists() and not old.exists()
    assert auth.ensure_token(settings, "27").exists(), "the new job gets a folder and token of its own"


def test_token_readable_by_others_is_refused(tmp_path):
    settings = RaySettings(state_dir=str(tmp_path))
    path = auth.ensure_token(settings, "7")
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match="readable by others"):
        auth.ensure_token(settings, "7")


def _env(**extra):
    base = {"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_ID": "1", "SLURMD_NODENAME": "n1", "SLURM_CPUS_ON_NODE": "8"}
    base.update(extra)
    return base


def test_rank_zero_is_the_head_and_attempt_comes_from_restart_count(tmp_path):
    from beam_slurm.config.job_spec import JobSpec

    JobSpec(gpus_per_node=8, sigterm_notice=True).write(tmp_path)
    ctx = NodeContext.from_env(_env(SLURM_RESTART_COUNT="2", BEAM_ATTEMPT_DIR=str(tmp_path)))
    assert ctx.rank == 0 and ctx.attempt == 2 and ctx.num_nodes == 2 and ctx.spec.gpus_per_node == 8 and ctx.cpus == 8
    assert ctx.attempt_dir == tmp_path and ctx.spec.sigterm_notice
    (tmp_path / "job_spec.json").write_text("{not json")
    with pytest.raises(NodeFailure, match="job spec"):
        NodeContext.from_env(_env(BEAM_ATTEMPT_DIR=str(tmp_path)))
    assert NodeContext.from_env(_env(SLURM_PROCID="1")).rank == 1


def test_more_than_one_task_per_node_is_refused():
    with pytest.raises(NodeFailure, match="--ntasks-per-node=1"):
        NodeContext.from_env(_env(SLURM_STEP_NUM_TASKS="4"))
    with pytest.raises(NodeFailure, match="SLURM_PROCID"):
        NodeContext.from_env({"SLURM_JOB_ID": "1"})


def test_allocated_gpus_prefers_cuda_visible_devices():
    assert allocated_gpus({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_STEP_GPUS": "6,7"}) == (["2", "3"], "CUDA_VISIBLE_DEVICES")
    assert allocated_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles", "SLURM_JOB_GPUS": "0"}) == (["0"], "SLURM_JOB_GPUS")
    assert allocated_gpus({}) == ([], "")


def test_gpu_view_mismatches_are_named():
    ok = {"ray_gpu_ids": ["0", "1"], "cuda_visible_devices": "0,1"}
    assert compare_gpu_view("n1", ["0", "1"], ok, {"cuda_visible_devices": "1"}) is None
    assert "Ray hands out 0" in compare_gpu_view("n2", ["0", "1"], {"ray_gpu_ids": ["0"], "cuda_visible_devices": "0"}, None)
    assert "issue 1577" in compare_gpu_view("n3", ["0", "1"], ok, {"cuda_visible_devices": "0,1", "noset": "1"})


class FakeClock:
    """Monotonic seconds that move only when the test says so (a test double of time.monotonic)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_head_names_a_worker_whose_ray_stops_answering(tmp_path):
    from beam_slurm.jobs.ray_cluster.rendezvous import Rendezvous
    from beam_slurm.jobs.ray_cluster.supervision import WorkerWatch

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    rendezvous = Rendezvous(tmp_path, 0, "1")
    rendezvous.publish_node(0, {"host": "n1", "ip": "127.0.0.1", "gpus": []})
    rendezvous.publish_node(1, {"host": "n2", "ip": "127.0.0.1", "gpus": [], "node_manager_port": listener.getsockname()[1]})
    clock = FakeClock()
    watch = WorkerWatch(rendezvous, lost_after_s=15.0, probe_every_s=2.0, clock=clock)
    assert watch.lost_node() == ""
    listener.close()  # the worker's raylet port stops answering (a real closed port, probed over TCP)
    clock.now += 2.0
    assert watch.lost_node() == "", "one missed probe is not a lost node"
    clock.now += 1.0
    assert watch.lost_node() == "", "between probes nothing is probed"
    clock.now += 13.5  # 16.5 s after the last answer: past lost_after_s
    assert "node n2 (127.0.0.1)" in watch.lost_node()


def test_worker_gives_up_on_a_head_that_stays_unreachable():
    from beam_slurm.jobs.ray_cluster.supervision import HeadWatch

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    clock = FakeClock()
    watch = HeadWatch("127.0.0.1", listener.getsockname()[1], lost_after_s=15.0, probe_every_s=1.0, clock=clock)
    assert not watch.lost()
    listener.close()
    clock.now += 10.0
    assert not watch.lost()
    clock.now += 6.0
    assert watch.lost()


def test_workers_join_at_most_node_start_concurrency_at_a_time(tmp_path):
    from beam_slurm.jobs.ray_cluster.worker import Worker

    settings = RaySettings(state_dir=str(tmp_path), temp_dir_root=str(tmp_path / "tmp"), auth=False,
                           node_start_concurrency=2, readiness_timeout_s=60)
    clock = FakeClock()
    slept: list[float] = []

    def make(rank: int, sleep) -> Worker:
        ctx = NodeContext.from_env(_env(SLURM_PROCID=str(rank), SLURM_STEP_NUM_NODES="8", SLURM_STEP_NUM_TASKS="8"))
        worker = Worker(ctx, settings, clock=clock, sleep=sleep)
        worker.rendezvous.folder.mkdir(parents=True, exist_ok=True)
        return worker

    # Ranks 1 and 2 start at once; rank 5 waits until 3 workers have joined (each wait: one poll).
    assert make(1, slept.append).wait_for_turn_to_start() and make(2, slept.append).wait_for_turn_to_start()
    assert slept == []
    joined = iter([1, 2, 3])

    def another_joins(seconds: float) -> None:
        slept.append(seconds)
        make(1, slept.append).rendezvous.mark_joined(next(joined))

    fifth = make(5, another_joins)
    assert fifth.wait_for_turn_to_start() and len(slept) == 3 and fifth.rendezvous.joined_count() == 3
    # Past the readiness deadline it starts anyway (the head's timeout names what is missing); a stop ends the wait.
    late = make(7, lambda s: setattr(clock, "now", clock.now + 61))
    assert late.wait_for_turn_to_start()
    stopped = make(7, lambda s: setattr(stopped, "stop_requested", True))
    assert not stopped.wait_for_turn_to_start()


def test_a_worker_follows_a_head_that_restarted_on_another_block_not_its_old_address(tmp_path):
    """Under load the head's own `ray start` can fail after it published its GCS address; it republishes on the next
    port block. A worker whose try failed meanwhile must join the new address, not retry the old one (where its
    `ray start` would wait minutes for a GCS that is gone), and must keep going when the head has not moved."""
    import json
    import threading
    import time

    from beam_slurm.jobs.ray_cluster.worker import Worker

    settings = RaySettings(state_dir=str(tmp_path / "state"), temp_dir_root=str(tmp_path / "tmp"), auth=False,
                           readiness_timeout_s=20, poll_interval_s=0.05)
    ctx = NodeContext(job_id="7", attempt=0, attempt_label="0", step="0", rank=1, num_nodes=2, host="n2", step_hosts=["n1", "n2"],
                      attempt_dir=None, cpus=1)
    worker = Worker(ctx, settings)
    old, new = socket.socket(), socket.socket()
    for listener in (old, new):
        listener.bind(("127.0.0.1", 0))
    new.listen()
    old_address, new_address = (f"127.0.0.1:{s.getsockname()[1]}" for s in (old, new))
    head_file = worker.rendezvous.head_file
    head_file.parent.mkdir(parents=True, exist_ok=True)
    head_file.write_text(json.dumps({"address": old_address, "block": 3}))  # published, then its GCS went away

    def republish():
        time.sleep(0.5)
        head_file.write_text(json.dumps({"address": new_address, "block": 4}))

    threading.Thread(target=republish).start()
    assert worker.head_moved(old_address) == (new_address, 4)
    assert worker.followed_head == {"address": new_address, "block": 4}
    assert worker.head_moved(new_address) is None, "a head that still answers has not moved: next block, same head"
    old.close()
    new.close()


def test_a_worker_gives_up_its_ray_start_once_the_head_republishes_elsewhere(tmp_path, log_lines):
    """The worker's `ray start` against a GCS that went away waits minutes (Ray's own retries) before it fails. Once
    the head has republished another address, the start is given up at once and its processes are stopped."""
    import json
    import sys
    import threading
    import time

    from beam_slurm.jobs.ray_cluster.local_ray import LocalRay, RayStartAbandoned
    from beam_slurm.jobs.ray_cluster.worker import Worker

    settings = RaySettings(state_dir=str(tmp_path / "state"), temp_dir_root=str(tmp_path / "tmp"), auth=False)
    ctx = NodeContext(job_id="7", attempt=0, attempt_label="0", step="0", rank=1, num_nodes=2, host="n2", step_hosts=["n1", "n2"],
                      attempt_dir=None, cpus=1)
    worker = Worker(ctx, settings)
    said = log_lines
    head_file = worker.rendezvous.head_file
    head_file.parent.mkdir(parents=True, exist_ok=True)
    head_file.write_text(json.dumps({"address": "10.0.0.1:6379", "block": 3}))
    waits_forever = tmp_path / "ray"  # stands in for `ray start` stuck on the gone GCS
    waits_forever.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    waits_forever.chmod(0o755)
    threading.Timer(0.5, lambda: head_file.write_text(json.dumps({"address": "10.0.0.1:6779", "block": 4}))).start()
    ray = LocalRay.create(tmp_path, "ray-7-0-", tmp_path / "ray.log")
    began = time.monotonic()
    with pytest.raises(RayStartAbandoned):
        ray.start(["start"], dict(os.environ), ray_executable=str(waits_forever),
                  while_starting=worker.head_republished_elsewhere("10.0.0.1:6379"))
    assert time.monotonic() - began < 10
    assert ray.process_pid("") is None, "a process of the given-up start still runs"
    assert any("10.0.0.1:6779" in line and "giving that start up" in line for line in said), said


# --- the job's folder on a node shared with other users ---

def test_the_job_folder_is_fresh_private_and_never_a_planted_name(tmp_path):
    from beam_slurm.jobs.ray_cluster.local_ray import LocalRay, make_private_dir

    root = tmp_path / "tmp"
    root.mkdir()
    planted = root / "ray-7-0"
    planted.mkdir(mode=0o777)
    (planted / "beam-ray.pgid").symlink_to(tmp_path / "victim")
    folders = {make_private_dir(root, "ray-7-0-") for _ in range(20)}
    assert len(folders) == 20 and planted not in folders
    for folder in folders:
        info = os.lstat(folder)
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
    ray = LocalRay.create(root, "ray-7-0-")
    assert ray.temp_dir.parent == ray.job_dir and ray.job_dir.name.startswith("ray-7-0-")
    assert not (tmp_path / "victim").exists()


def test_a_job_folder_swapped_for_a_symlink_before_ray_start_is_refused(tmp_path):
    """Between the folder's creation and `ray start`, the folder replaced by a symlink to another folder: the start
    is refused (naming the folder) and nothing is written through the link."""
    from beam_slurm.jobs.ray_cluster.local_ray import LocalRay

    ray = LocalRay.create(tmp_path, "ray-7-0-", tmp_path / "ray.log")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    ray.job_dir.rmdir()
    ray.job_dir.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(PermissionError, match=f"{ray.job_dir} is a symlink"):
        ray.start(["--version"], dict(os.environ), ray_executable="/bin/true")
    assert list(elsewhere.iterdir()) == []


def test_the_pgid_file_and_the_start_log_are_never_written_through_a_symlink(tmp_path):
    from beam_slurm.jobs.ray_cluster.local_ray import PGID_FILE, LocalRay, open_log, write_new_file

    victim = tmp_path / "victim"
    victim.write_text("theirs")
    ray = LocalRay.create(tmp_path, "ray-7-0-", tmp_path / "ray.log")
    (ray.job_dir / PGID_FILE).symlink_to(victim)
    ray.start([], dict(os.environ), ray_executable="/bin/true")  # the link is removed, a new file made
    assert victim.read_text() == "theirs" and not (ray.job_dir / PGID_FILE).is_symlink()
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(OSError):
        write_new_file(link, "1234")
    with pytest.raises(OSError):
        open_log(link)
    assert victim.read_text() == "theirs"


def test_leftovers_of_this_job_are_stopped_and_removed_and_planted_folders_named_and_left(tmp_path, log_lines):
    from beam_slurm.jobs.ray_cluster.worker import Worker

    settings = RaySettings(state_dir=str(tmp_path / "state"), temp_dir_root=str(tmp_path / "tmp"), auth=False)
    root = tmp_path / "tmp"
    root.mkdir()
    earlier = root / "ray-7-0-earlier1"
    earlier.mkdir(mode=0o700)
    (earlier / "ray").mkdir()
    planted = root / "ray-7-1"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    (planted / "beam-ray.pgid").symlink_to(tmp_path / "victim")
    link = root / "ray-7-2"
    link.symlink_to(tmp_path, target_is_directory=True)
    ctx = NodeContext(job_id="7", attempt=1, attempt_label="1", step="0", rank=1, num_nodes=2, host="n2",
                      step_hosts=["n1", "n2"], attempt_dir=None, cpus=1)
    worker = Worker(ctx, settings)
    said = log_lines
    worker.stop_leftovers_of_earlier_attempts()
    assert not earlier.exists(), "an earlier attempt's folder is removed"
    assert planted.exists() and link.is_symlink() and not (tmp_path / "victim").exists()
    assert any(f"refused {planted}: it is open to others (mode 777)" in line for line in said), said
    assert any(f"refused {link}: it is a symlink" in line for line in said), said
    assert worker.ray.job_dir.exists()
    worker.ray.remove()
    assert not worker.ray.job_dir.exists()


def test_every_port_ray_opens_is_in_the_block_including_the_metrics():
    settings = RaySettings()
    ports = ports_for_block(5, settings)
    base = settings.port_range_start + 5 * settings.ports_per_job
    block = range(base, base + settings.ports_per_job)
    env = ports.ray_env()
    assert set(env) == {"AUTOSCALER_METRIC_PORT", "DASHBOARD_METRIC_PORT"}
    assert all(int(port) in block for port in env.values())
    assert "--metrics-export-port=%d" % ports.metrics_export in ports.ray_start_args(head=False)
    record = ports.record(head=True)
    assert all(port in block for port in record.values()) and len(set(record.values())) == len(record)
    assert {"autoscaler_metrics", "dashboard_metrics", "gcs"} <= set(record)
    assert not {"autoscaler_metrics", "dashboard_metrics", "gcs"} & set(ports.record(head=False))
    assert sorted(ports.all_ports(head=True)) == sorted(set(ports.all_ports(head=True)))


def test_the_start_up_hook_binds_the_metrics_servers_to_the_node_address_only(tmp_path):
    """Ray's Prometheus servers bind every address; under the hook (first on PYTHONPATH, as `ray start` gets it) a
    wildcard bind takes the node's address, and an explicit address is kept."""
    import subprocess
    import sys

    from beam_slurm.jobs.ray_cluster.role import BIND_HOOK_DIR

    code = ("import prometheus_client, socket, wsgiref.simple_server as s\n"
            "srv, _ = prometheus_client.start_http_server(0)\n"
            "print(srv.server_address[0])\n"
            "print(s.make_server('127.0.0.1', 0, lambda e, r: []).server_address[0])\n")
    env = {**os.environ, "PYTHONPATH": str(BIND_HOOK_DIR), "BEAM_RAY_METRICS_HOST": "127.0.0.2"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["127.0.0.2", "127.0.0.1"]
    env.pop("BEAM_RAY_METRICS_HOST")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split()[0] == "0.0.0.0", "without the variable the hook changes nothing"


def test_a_driver_stopped_for_a_failed_node_is_told_that_no_save_may_follow(tmp_path):
    """The batch shell saw a node's step end: the head stops the driver with the attempt marked as stopping, so the
    driver does not hold that SIGTERM as a preemption's notice and train on (and save) without the node."""
    import sys
    import time

    from beam_slurm.config.job_spec import JobSpec
    from beam_slurm.core.ray_records import STOPPING_FILE
    from beam_slurm.jobs.ray_cluster.head import Head

    attempt_dir = tmp_path / "attempt-0"
    attempt_dir.mkdir()
    settings = RaySettings(state_dir=str(tmp_path / "state"), temp_dir_root=str(tmp_path / "tmp"), auth=False,
                           poll_interval_s=0.05, driver_stop_grace_s=5)
    ctx = NodeContext(job_id="7", attempt=0, attempt_label="0", step="0", rank=0, num_nodes=2, host="n1",
                      step_hosts=["n1", "n2"], attempt_dir=attempt_dir, cpus=1, spec=JobSpec(sigterm_notice=True))
    head = Head(ctx, settings)
    head.ray.alive = lambda names: True  # the head's Ray is not started here; only the driver's stop is looked at
    head.rendezvous.folder.mkdir(parents=True, exist_ok=True)
    seen = tmp_path / "seen"
    driver = [sys.executable, "-c", (
        "import pathlib, signal, sys, time\n"
        f"folder, seen = pathlib.Path({str(attempt_dir)!r}), pathlib.Path({str(seen)!r})\n"
        "def on_term(*_):\n"
        f"    seen.write_text('stopping' if (folder / {STOPPING_FILE!r}).exists() else 'held as a notice')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "(folder / 'started').touch()\n"
        "time.sleep(60)\n")]

    def stop_when_started(seconds: float) -> None:
        if (attempt_dir / "started").exists():
            head.rendezvous.stop_driver_file(0).touch()
        time.sleep(seconds)

    head.sleep = stop_when_started
    status, request = head.run_driver(driver, "127.0.0.1:1", {})
    assert request is None and status != 0
    assert seen.read_text() == "stopping"
