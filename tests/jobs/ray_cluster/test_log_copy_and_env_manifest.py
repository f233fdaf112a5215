"""The Ray log copy (bound, newest first, deadline, unchanged files kept) and the environment manifest (patterns,
secret files, masking, refusal of secrets in the recipe) on real files, without a cluster; the wiring runs on the
sandbox in tests/jobs/training/test_operate_sandbox.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from beam_slurm.config import env_manifest
from beam_slurm.config.job_spec import LogCopySettings
from beam_slurm.config.load import load_config
from beam_slurm.config.skyrl_command import SkyRLLaunch
from beam_slurm.core.errors import ConfigError
from beam_slurm.jobs.ray_cluster.log_copy import COPY_RECORD, LogCopier, copy_logs
from beam_slurm.jobs.training.steps import ContainerHook
from beam_slurm.verbs.attach import Target, attach_argv, ray_environment

BASE = ["trainer.backend=rehearsal", "paths.model_path=/m", "paths.data_dir=/d"]


def ray_session(tmp_path: Path, files: dict[str, int]) -> Path:
    """A Ray temp dir with one session whose logs/ holds `files` (name -> size), oldest first, and session_latest."""
    temp = tmp_path / "ray-1-0"
    logs = temp / "session_2026-11-30_00-00-00_1_1" / "logs"
    logs.mkdir(parents=True)
    now = time.time()
    for i, (name, size) in enumerate(files.items()):
        path = logs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes([65 + i]) * (size - 4) + b"END\n")
        os.utime(path, (now - 100 + i, now - 100 + i))
    (temp / "session_latest").symlink_to(logs.parent)
    return temp


def test_copy_takes_newest_first_cuts_the_crossing_file_to_its_tail_and_counts_the_rest(tmp_path):
    temp = ray_session(tmp_path, {"old.log": 4000, "middle.log": 3000, "raylet.out": 1000, "events/ev.log": 500})
    dest = tmp_path / "logs" / "123-0" / "ray" / "n1"
    summary = copy_logs(temp, dest, 2000, reason="periodic")
    session = dest / "session_2026-11-30_00-00-00_1_1"
    assert (session / "events" / "ev.log").stat().st_size == 500 and (session / "raylet.out").stat().st_size == 1000
    cut = (session / "middle.log").read_bytes()
    assert len(cut) == 500 and cut.endswith(b"END\n")  # the tail, where the errors are
    assert not (session / "old.log").exists()
    assert summary["bytes"] == 2000 and summary["files_left_out"] == 1 and summary["files_cut_to_their_tail"] == 1
    assert json.loads((dest / COPY_RECORD).read_text())["reason"] == "periodic"
    assert not list(dest.rglob("session_latest"))  # the link is not followed twice


def test_a_second_copy_keeps_unchanged_files_and_drops_what_fell_out_of_the_bound(tmp_path):
    temp = ray_session(tmp_path, {"a.log": 1000, "b.log": 1000})
    dest = tmp_path / "n1"
    assert copy_logs(temp, dest, 10_000, reason="periodic")["files_copied"] == 2
    newest = next(temp.glob("session_*/logs")) / "c.log"
    newest.write_bytes(b"x" * 1500)
    again = copy_logs(temp, dest, 2600, reason="end")
    assert again["files_unchanged"] == 1 and again["files_copied"] == 2 and again["stale_removed"] == 0
    assert sum(p.stat().st_size for p in dest.rglob("*.log")) <= 2600
    third = copy_logs(temp, dest, 1500, reason="end")
    assert third["stale_removed"] == 2 and [p.name for p in dest.rglob("*.log")] == ["c.log"]


def test_the_last_copy_stops_at_its_deadline_and_says_so(tmp_path):
    temp = ray_session(tmp_path, {f"w{i}.log": 100 for i in range(5)})
    ticks = iter(range(100))
    summary = copy_logs(temp, tmp_path / "n1", 10_000, reason="stop", deadline=2, clock=lambda: next(ticks))
    assert not summary["finished"] and summary["files_copied"] == 3 and summary["files_left_out"] == 2


def test_copier_copies_at_start_and_at_finish(tmp_path, log_lines):
    temp = ray_session(tmp_path, {"raylet.out": 100})
    lines = log_lines
    copier = LogCopier(temp, tmp_path / "attempt", "n2", LogCopySettings(interval_s=3600, max_bytes=10_000, final_s=5))
    copier.start()
    record = tmp_path / "attempt" / "ray" / "n2" / COPY_RECORD
    deadline = time.monotonic() + 10
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(record.read_text())["reason"] == "periodic"
    copier.finish("end")
    assert json.loads(record.read_text())["reason"] == "end"
    assert lines and "Ray logs copied to" in lines[-1]


def test_log_copy_settings_come_from_the_recipe():
    cfg = load_config(BASE + ["cluster.log_copy_interval_s=5", "cluster.log_copy_max_mbytes=2", "cluster.log_copy_s=7"],
                      validate=False)
    settings = LogCopySettings.from_config(cfg)
    assert (settings.interval_s, settings.max_bytes, settings.final_s) == (5.0, 2 * 1024 * 1024, 7.0)
    assert LogCopySettings.schema_defaults() == LogCopySettings.from_config(load_config(BASE, validate=False))


@pytest.mark.parametrize("name, secret", [("HF_TOKEN", True), ("WANDB_API_KEY", True), ("AWS_SECRET_ACCESS_KEY", True),
                                          ("DB_PASSWORD", True), ("RAY_AUTH_TOKEN_PATH", False),
                                          ("HF_HUB_OFFLINE", False), ("NCCL_SOCKET_IFNAME", False),
                                          ("SSH_KEY_FILE", False)])
def test_secret_names(name, secret):
    assert env_manifest.is_secret(name) is secret


def test_nodes_resolve_patterns_recipe_variables_and_secret_files(tmp_path):
    secret_file = tmp_path / "wandb_key"
    secret_file.write_text("planted-key-value\n")
    secret_file.chmod(0o600)
    cfg = load_config(BASE + [f"+trainer.env_secret_files.WANDB_API_KEY={secret_file}"], validate=False)
    spec = env_manifest.describe(cfg, {"CKPT_PATH": "/c", "MAX_TRAINING_STEPS": "3"})
    assert "planted" not in json.dumps(spec)
    environ = {"HF_HUB_OFFLINE": "1", "WANDB_PROJECT": "p", "NCCL_DEBUG": "INFO",
               "HF_TOKEN": "planted-token", "CKPT_PATH": "/c", "UNRELATED": "x"}
    values, missing = env_manifest.resolve(spec, environ)
    assert values == {"HF_HUB_OFFLINE": "1", "WANDB_PROJECT": "p", "NCCL_DEBUG": "INFO", "HF_TOKEN": "planted-token",
                      "CKPT_PATH": "/c", "WANDB_API_KEY": "planted-key-value"}
    assert missing == ["MAX_TRAINING_STEPS"]
    env_manifest.record(tmp_path, "n1", values, missing)
    written = (tmp_path / "env" / "n1.json").read_text()
    assert "planted" not in written and json.loads(written)["exported"]["HF_TOKEN"] == "<set>"
    assert "planted" not in env_manifest.summary(values) and "HF_HUB_OFFLINE=1" in env_manifest.summary(values)
    secret_file.unlink()
    with pytest.raises(env_manifest.ManifestError, match="trainer.env_secret_files.WANDB_API_KEY"):
        env_manifest.resolve(spec, environ)
    assert env_manifest.resolve(None, environ) == ({}, [])


def test_a_secret_in_the_recipe_is_refused_without_printing_it():
    with pytest.raises(ConfigError) as refused:
        load_config(BASE + ["+trainer.extra_env.HF_TOKEN=planted-in-recipe"])
    text = str(refused.value)
    assert "trainer.extra_env.HF_TOKEN" in text and "env_secret_files" in text and "planted" not in text
    with pytest.raises(ConfigError, match="use an absolute path"):
        load_config(BASE + ["+trainer.env_secret_files.WANDB_API_KEY=relative/file"])
    load_config(BASE + ["+trainer.extra_env.NCCL_DEBUG=INFO"])  # an ordinary variable stays fine


def test_rendered_commands_show_set_for_secrets():
    launch = SkyRLLaunch("m", ["a=1"], {"HF_TOKEN": "planted", "NCCL_DEBUG": "INFO"})
    line = launch.shell()
    assert "HF_TOKEN='<set>'" in line and "NCCL_DEBUG=INFO" in line and "planted" not in line


def test_attach_command_and_environment():
    head = {"host": "n1", "address": "10.0.0.1:12000", "token_path": "/state/jobs/7/ray_auth_token", "job_id": "7"}
    target = Target("7", 0, "n2", ["n1", "n2"], head)
    shell = attach_argv(target, [], ContainerHook(), shell="/bin/bash")
    assert shell[:7] == ["srun", "--overlap", "--jobid=7", "--nodes=1", "--ntasks=1", "--nodelist=n2",
                         "--job-name=attach"] and shell[-3:] == ["--pty", "/bin/bash", "-i"]
    hook = ContainerHook(srun_args=["--container-name=beam-7"], command_prefix=["apptainer", "exec", "img.sif"])
    command = attach_argv(target, ["ray", "status"], hook, shell="/bin/bash")
    assert "--pty" not in command and command[-6:] == ["--container-name=beam-7", "apptainer", "exec", "img.sif",
                                                       "ray", "status"]
    env = ray_environment(head, {"SLURM_JOB_ID": "99", "SLURM_CONF": "/etc/slurm.conf", "PATH": "/usr/bin"}, "/venv/bin")
    assert env["RAY_ADDRESS"] == "10.0.0.1:12000" and env["RAY_AUTH_MODE"] == "token"
    assert env["RAY_AUTH_TOKEN_PATH"] == "/state/jobs/7/ray_auth_token" and "SLURM_JOB_ID" not in env
    assert env["SLURM_CONF"] == "/etc/slurm.conf" and env["PATH"].startswith("/venv/bin" + os.pathsep)


# --- the copy on a node shared with other users: nothing followed, nothing of another user's, never the token ---

def test_a_symlink_in_the_logs_to_a_readable_private_file_is_not_copied(tmp_path):
    temp = ray_session(tmp_path, {"raylet.out": 100})
    private = tmp_path / "state" / "jobs" / "7"
    private.mkdir(parents=True)
    token = private / "ray_auth_token"
    token.write_text("secret-token-value")
    logs = next(temp.glob("session_*/logs"))
    (logs / "zz-steal.log").symlink_to(token)
    (logs / "stolen-dir").symlink_to(private, target_is_directory=True)
    dest = tmp_path / "n1"
    summary = copy_logs(temp, dest, 10_000, reason="periodic", private=[token])
    copied = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert copied == {COPY_RECORD, f"{logs.parent.name}/raylet.out"}, copied
    assert not any("secret-token-value" in p.read_text() for p in dest.rglob("*") if p.is_file())
    assert any("zz-steal.log: not a regular file (a symlink)" in line for line in summary["skipped"]), summary


def test_a_hard_link_of_the_token_is_not_copied(tmp_path):
    temp = ray_session(tmp_path, {"raylet.out": 100})
    token = tmp_path / "ray_auth_token"
    token.write_text("secret-token-value")
    os.link(token, next(temp.glob("session_*/logs")) / "linked.log")
    summary = copy_logs(temp, tmp_path / "n1", 10_000, reason="periodic", private=[token])
    assert not any("secret-token-value" in p.read_text() for p in (tmp_path / "n1").rglob("*") if p.is_file())
    assert any(line.startswith(f"{next(temp.glob('session_*')).name}/linked.log") for line in summary["skipped"])


def test_a_folder_swapped_for_a_symlink_after_the_listing_is_read_from_the_folder_listed(tmp_path, monkeypatch):
    """The attack of a second user of the node: a folder listed, then swapped for a symlink to the job's private
    folder before its file is opened. The copy reads by the listed folder's descriptor: the swap changes nothing."""
    from beam_slurm.jobs.ray_cluster import log_copy

    temp = ray_session(tmp_path, {"big.log": 5000, "late/last.log": 10})
    private = tmp_path / "private"
    private.mkdir()
    (private / "last.log").write_text("secret-token-value")  # what the swapped-in link would point at
    late = next(temp.glob("session_*/logs")) / "late"
    listed = log_copy._Tree.files

    def list_then_swap(tree, temp_dir):
        found = listed(tree, temp_dir)
        late.rename(late.with_name("late-moved"))
        late.symlink_to(private, target_is_directory=True)
        return found

    monkeypatch.setattr(log_copy._Tree, "files", list_then_swap)
    dest = tmp_path / "n1"
    copy_logs(temp, dest, 10_000, reason="periodic")
    copied = next(dest.glob("session_*/late/last.log")).read_bytes()
    assert copied.endswith(b"END\n") and b"secret" not in copied, copied


def test_files_and_folders_of_another_user_are_skipped_and_named(tmp_path, log_lines):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    temp = ray_session(tmp_path, {"raylet.out": 100, "planted/a.log": 50, "other.log": 60})
    logs = next(temp.glob("session_*/logs"))
    os.chown(logs / "planted", 1001, 1001)
    os.chown(logs / "other.log", 1001, 1001)
    lines = log_lines
    copier = LogCopier(temp, tmp_path / "attempt", "n1", LogCopySettings(interval_s=0, max_bytes=10_000, final_s=5))
    copier.copy("periodic")
    copier.copy("periodic")
    dest = tmp_path / "attempt" / "ray" / "n1"
    assert [p.name for p in dest.rglob("*.log")] == [] and [p.name for p in dest.rglob("raylet.out")] == ["raylet.out"]
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 2, lines  # each named once, not at every copy
    assert any("planted/: belongs to uid 1001" in line for line in skipped), skipped
    assert any("other.log: belongs to uid 1001" in line for line in skipped), skipped


def test_copied_logs_take_the_umask_mode_not_the_source_mode(tmp_path):
    temp = ray_session(tmp_path, {"raylet.out": 100, "sub/w.log": 10})
    for path in temp.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o600)
    old = os.umask(0o027)
    try:
        copy_logs(temp, tmp_path / "n1", 10_000, reason="periodic")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "n1").rglob("*") if p.name != COPY_RECORD}
    assert modes == {next(temp.glob("session_*")).name: 0o750, "raylet.out": 0o640, "sub": 0o750, "w.log": 0o640}, modes


def test_a_symlink_planted_in_the_copy_is_replaced_not_written_through(tmp_path):
    temp = ray_session(tmp_path, {"raylet.out": 100})
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("untouched")
    dest = tmp_path / "n1"
    session = dest / next(temp.glob("session_*")).name
    session.mkdir(parents=True)
    (session / "raylet.out").symlink_to(elsewhere)
    copy_logs(temp, dest, 10_000, reason="periodic")
    assert elsewhere.read_text() == "untouched"
    assert not (session / "raylet.out").is_symlink() and (session / "raylet.out").read_bytes().endswith(b"END\n")
