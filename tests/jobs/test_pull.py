"""The pull stage for real (processes, lock files, renames, records) with the container runtime replaced by the
test double tests/support/test_doubles/fake_image_import, installed as `enroot` / `apptainer`."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from beam_slurm.config.container import ContainerSettings
from beam_slurm.config.container_runtime import cached_image_path, digest_record_path
from beam_slurm.config.overrides import override
from beam_slurm.core.shared_lock import LockTimeout, SharedFileLock, process_start_time
from beam_slurm.jobs.container_pull import image_is_current, import_command, record_matches

HERE = Path(__file__).parent
REPO = HERE.parents[1]
FAKE_IMPORT = HERE.parent / "support" / "test_doubles" / "fake_image_import"
IMAGE = "ghcr.io/example/skyrl:beam-release"


@pytest.fixture
def runtime_env(tmp_path):
    """Environment whose PATH has the test double as `enroot` and `apptainer`; returns (env, log file, cache dir)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("enroot", "apptainer"):
        (bin_dir / name).symlink_to(FAKE_IMPORT)
    log = tmp_path / "runtime.log"
    cache = tmp_path / "shared containers $x"  # a space and a $ on purpose
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_RUNTIME_LOG": str(log),
        "FAKE_RUNTIME_SLEEP": "0",
    }
    for name in ("BEAM_CONTAINER_RUNTIME", "BEAM_CONTAINER_IMAGE", "BEAM_CONTAINER_CACHE_DIR"):
        env.pop(name, None)
    return env, log, cache


def pull_keys(cache: Path, runtime: str = "pyxis", image: str = IMAGE) -> list[str]:
    return [override("container.runtime", runtime), override("container.image", image),
            override("container.image_cache_dir", str(cache))]


def pull_argv(cache: Path, *extra: str, runtime: str = "pyxis", image: str = IMAGE) -> list[str]:
    return [sys.executable, str(REPO / "stages" / "pull_container.py"), *pull_keys(cache, runtime, image), *extra]


def run_pull(env, cache, *extra, runtime="pyxis", image=IMAGE, **env_overrides):
    return subprocess.run(pull_argv(cache, *extra, runtime=runtime, image=image), env={**env, **env_overrides},
                          capture_output=True, text=True, timeout=60)


def log_lines(log: Path, kind: str) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith(kind + " ")] if log.exists() else []


def expected_image(cache: Path, runtime: str = "pyxis") -> Path:
    return cached_image_path(ContainerSettings(runtime=runtime, image=IMAGE, image_cache_dir=str(cache)))


def assert_complete_and_clean(cache: Path, runtime: str = "pyxis") -> Path:
    image = expected_image(cache, runtime)
    content = image.read_bytes()
    assert content.startswith(b"partial;image docker://") and content.endswith(b"\n"), content
    record = json.loads(digest_record_path(image).read_text())
    assert record["sha256"] == "sha256:" + hashlib.sha256(content).hexdigest()
    assert record["size"] == len(content) and record["image"] == IMAGE and record["runtime"] == runtime
    leftovers = sorted(p.name for p in cache.iterdir() if p.name not in (image.name, digest_record_path(image).name))
    assert leftovers == [], f"temp or lock files left behind: {leftovers}"
    return image


def test_racing_jobs_import_once_and_all_get_the_file(runtime_env):
    env, log, cache = runtime_env
    env = {**env, "FAKE_RUNTIME_SLEEP": "2"}
    racers = [subprocess.Popen(pull_argv(cache), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(5)]
    outputs = [p.communicate(timeout=60) for p in racers]
    assert [p.returncode for p in racers] == [0] * 5, outputs
    assert len(log_lines(log, "start")) == 1 and len(log_lines(log, "done")) == 1, log.read_text()
    image = assert_complete_and_clean(cache)
    assert all(out.strip().splitlines()[-1] == str(image) for out, _ in outputs)
    waited = [out for out, _ in outputs if "imported by another job" in out]
    assert len(waited) >= 1, "the others should have found the finished import under the lock or before it"


def test_second_run_skips_force_reimports_and_a_changed_file_is_reimported(runtime_env):
    env, log, cache = runtime_env
    assert run_pull(env, cache).returncode == 0
    second = run_pull(env, cache)
    assert second.returncode == 0 and "skipping" in second.stdout
    assert len(log_lines(log, "start")) == 1
    settings = ContainerSettings(runtime="pyxis", image=IMAGE, image_cache_dir=str(cache))
    assert image_is_current(settings)

    forced = run_pull(env, cache, "--force")
    assert forced.returncode == 0 and len(log_lines(log, "start")) == 2
    assert_complete_and_clean(cache)

    image = expected_image(cache)
    image.write_bytes(image.read_bytes() + b"truncated or replaced by hand")
    assert not image_is_current(settings)
    assert run_pull(env, cache).returncode == 0 and len(log_lines(log, "start")) == 3
    assert_complete_and_clean(cache)

    # Same size, different bytes: only --verify (re-hashing) notices.
    image.write_bytes(image.read_bytes().replace(b"image", b"IMAGE"))
    assert run_pull(env, cache).returncode == 0 and len(log_lines(log, "start")) == 3
    assert run_pull(env, cache, "--verify").returncode == 0 and len(log_lines(log, "start")) == 4


def test_apptainer_pull_gets_credentials_only_through_its_environment(runtime_env):
    env, log, cache = runtime_env
    secret = "s3cret-Pa55"
    result = run_pull(env, cache, runtime="apptainer", APPTAINER_DOCKER_USERNAME="bob", APPTAINER_DOCKER_PASSWORD=secret)
    assert result.returncode == 0, result.stderr
    start = log_lines(log, "start")[0]
    assert "creds-env=yes" in start and f"pull {expected_image(cache, 'apptainer').parent}" in start
    assert secret not in start and secret not in result.stdout + result.stderr
    assert_complete_and_clean(cache, "apptainer")


def test_killed_lock_holder_is_taken_over_by_the_next_job(runtime_env):
    env, log, cache = runtime_env
    holder = subprocess.Popen(pull_argv(cache), env={**env, "FAKE_RUNTIME_SLEEP": "60"}, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not log_lines(log, "start") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log_lines(log, "start"), "the first job never started its import"
    os.killpg(holder.pid, signal.SIGKILL)  # the job dies with its import, as on a node failure or scancel -s KILL
    holder.wait(timeout=10)
    lock_file = expected_image(cache).with_name(expected_image(cache).name + ".lock")
    assert lock_file.exists(), "the killed holder's lock is still there for the next job to judge"

    started = time.monotonic()
    nxt = run_pull(env, cache)
    assert nxt.returncode == 0, nxt.stderr
    # Taken over at once because the holder is known dead, not after the 120 s of silence a stale lock needs.
    assert time.monotonic() - started < 120
    assert "taking over" in nxt.stdout and "is gone" in nxt.stdout
    assert len(log_lines(log, "start")) == 2 and len(log_lines(log, "done")) == 1
    assert_complete_and_clean(cache)  # the dead holder's partial temp file is gone too


def write_foreign_lock(lock_file: Path, host: str = "other-node") -> None:
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock_file.write_text(json.dumps({"host": host, "pid": 1234567, "pid_start": "1", "token": "f" * 32, "acquired_at": 0}))


def test_lock_without_heartbeat_from_another_node_is_taken_over_after_stale_after(runtime_env):
    env, log, cache = runtime_env
    lock_file = expected_image(cache).with_name(expected_image(cache).name + ".lock")
    write_foreign_lock(lock_file)
    started = time.monotonic()
    result = run_pull(env, cache, "container.lock_stale_after_s=2")
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "no heartbeat from pid 1234567 on other-node" in result.stdout
    assert took >= 2  # waited for the stale period; the upper side is the wait timeout, tested below
    assert_complete_and_clean(cache)


def test_live_holder_elsewhere_makes_waiters_time_out_naming_it(runtime_env, tmp_path):
    env, log, cache = runtime_env
    lock_file = expected_image(cache).with_name(expected_image(cache).name + ".lock")
    write_foreign_lock(lock_file)
    stop = threading.Event()

    def heartbeat():  # another node's holder that is alive: it keeps touching the file
        while not stop.wait(0.3):
            os.utime(lock_file)

    beater = threading.Thread(target=heartbeat, daemon=True)
    beater.start()
    try:
        result = run_pull(env, cache, "container.lock_stale_after_s=1", "container.lock_timeout_s=3")
    finally:
        stop.set()
        beater.join()
    assert result.returncode == 1
    assert "still held by pid 1234567 on other-node" in result.stderr
    assert log_lines(log, "start") == [] and lock_file.exists()


def test_failed_import_leaves_no_image_record_temp_or_lock(runtime_env):
    env, log, cache = runtime_env
    result = run_pull(env, cache, FAKE_RUNTIME_FAIL="1")
    assert result.returncode == 1 and "exited with status 3" in result.stderr
    assert sorted(p.name for p in cache.iterdir()) == []
    assert run_pull(env, cache).returncode == 0
    assert_complete_and_clean(cache)


@pytest.mark.parametrize(
    "args,env_change,words",
    [
        (["container.image="], {}, "container.image: runtime 'pyxis' needs an image"),
        (["container.image=/shared/skyrl.sqsh"], {}, "nothing to pull"),
        ([override("container.image", "bob:pw@ghcr.io/o/i:t")], {}, "credentials"),
        (["container.image_cache_dir=relative/dir"], {}, "container.image_cache_dir"),
        (["container.runtime=none"], {}, "container.runtime='none': nothing to pull for this runtime"),
        ([], {"PATH": "/usr/bin:/bin"}, "`enroot` is not on PATH"),
        (["--image", ""], {}, "--image is an old spelling, not accepted; use container.image=''"),
        (["container.imag=x"], {}, "container.imag='x': unknown key"),
    ],
)
def test_bad_input_exits_2_before_anything_runs(runtime_env, args, env_change, words):
    env, log, cache = runtime_env
    result = subprocess.run(pull_argv(cache, *args), env={**env, **env_change}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result
    assert words in result.stderr and result.stderr.startswith("beam-slurm pull-container: "), result.stderr
    assert "fix:" in result.stderr or "unknown key" in result.stderr or "old spelling" in result.stderr
    assert not log.exists()


def test_sbatch_script_finds_the_checkout_and_runs_the_stage(runtime_env, tmp_path):
    env, log, cache = runtime_env
    env = {k: v for k, v in env.items() if k not in ("BEAM_SLURM_HOME", "SLURM_JOB_ID")}
    script = REPO / "sbatch" / "pull_container.sh"
    run = lambda **extra: subprocess.run(["bash", str(script), *pull_keys(cache)], env={**env, **extra},
                                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    result = run()
    assert result.returncode == 0, result.stderr
    assert_complete_and_clean(cache)
    # The old flags are refused (exit 2, before anything runs), naming the key to use.
    old = subprocess.run(["bash", str(script), "--image", IMAGE, "--cache-dir", str(cache)],
                         env={**env, "BEAM_CONTAINER_RUNTIME": "pyxis"}, capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert old.returncode == 2 and "skipping" not in old.stdout, old.stderr
    assert f"--image is an old spelling, not accepted; use container.image={IMAGE}" in old.stderr
    wrong = run(BEAM_SLURM_HOME=str(tmp_path))
    assert wrong.returncode == 2 and "set BEAM_SLURM_HOME" in wrong.stderr


def test_import_commands_keep_the_reference_in_one_argument():
    out = Path("/shared/c $x/a.sqsh")
    assert import_command("pyxis", "nvcr.io/nvidia/pytorch:24.01-py3", out) == [
        "enroot", "import", "-o", str(out), "docker://nvcr.io#nvidia/pytorch:24.01-py3"]
    assert import_command("apptainer", "nvcr.io#nvidia/pytorch:24.01-py3", out) == [
        "apptainer", "pull", str(out), "docker://nvcr.io/nvidia/pytorch:24.01-py3"]


def test_pinned_digest_must_match_the_record(tmp_path):
    pinned = f"ghcr.io/o/i@sha256:{'a' * 64}"
    settings = ContainerSettings(runtime="pyxis", image=pinned, image_cache_dir=str(tmp_path))
    image = cached_image_path(settings)
    image.write_text("x")
    record = {"image": pinned, "runtime": "pyxis", "size": 1, "registry_digest": "sha256:" + "b" * 64}
    digest_record_path(image).write_text(json.dumps(record))
    assert not record_matches(settings, image)
    digest_record_path(image).write_text(json.dumps({**record, "registry_digest": "sha256:" + "a" * 64}))
    assert record_matches(settings, image)


def test_holder_notices_when_its_lock_was_taken(tmp_path):
    lock = SharedFileLock(tmp_path / "x.lock", stale_after=1.2, heartbeat=0.2)
    lock.acquire(timeout=5)
    assert lock.still_held()
    write_foreign_lock(tmp_path / "x.lock")  # as if a waiter had judged it stale and another process took it
    assert lock.lost.wait(3)
    assert not lock.still_held()
    lock.release()
    assert (tmp_path / "x.lock").exists(), "release must not delete someone else's lock"


def test_reused_pid_on_this_host_counts_as_gone(tmp_path):
    lock_file = tmp_path / "y.lock"
    lock_file.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "pid_start": "not-my-start",
                                     "token": "e" * 32, "acquired_at": 0}))
    assert process_start_time(os.getpid()) not in (None, "not-my-start")
    lock = SharedFileLock(lock_file, stale_after=60)
    lock.acquire(timeout=2)
    lock.release()
    with pytest.raises(LockTimeout):
        other = SharedFileLock(lock_file, stale_after=60)
        write_foreign_lock(lock_file)
        other.acquire(timeout=0.5)


def test_holder_that_loses_its_lock_stops_its_import_and_never_publishes_a_second_copy(runtime_env):
    env, log, cache = runtime_env
    image = expected_image(cache)
    lock_file = image.with_name(image.name + ".lock")
    holder = subprocess.Popen(pull_argv(cache, "container.lock_stale_after_s=2"), env={**env, "FAKE_RUNTIME_SLEEP": "3"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not log_lines(log, "start") and time.monotonic() < deadline:
        time.sleep(0.05)
    write_foreign_lock(lock_file)  # a waiter elsewhere wrongly judged it stale and took it over
    out, err = holder.communicate(timeout=60)
    assert holder.returncode == 0, err
    assert "lost the lock during the import" in out and "taking over, no heartbeat from pid 1234567" in out
    assert len(log_lines(log, "start")) == 2 and len(log_lines(log, "done")) == 1, log.read_text()
    assert_complete_and_clean(cache)
