"""`beam-slurm doctor --json` against the Slurm sandbox, as a user runs it (`.venv/bin/beam-slurm`, a real subprocess):
the values it reports are what `scontrol show config` says, the `nonotice` partition (PreemptMode=CANCEL, GraceTime
0) is broken with a fix, `low` (the user signal, GraceTime 20) is not, and a controller or an accounting daemon that
does not answer is named, exit 1, no traceback. The outages are copies of the sandbox's configuration folder whose
port nothing listens on (tests/verbs/test_outages_sandbox.py does the same); the sandbox's daemons are not touched."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from json_output_checks import assert_json_valid
from local_ports import free_port
from slurm_conf_copies import conf_copy

from beam_slurm.slurm import scheduler

pytestmark = [pytest.mark.sandbox, pytest.mark.slurm_semantics]

REPO_ROOT = Path(__file__).resolve().parents[2]
BEAM = str(REPO_ROOT / ".venv" / "bin" / "beam-slurm")


def doctor(env: dict[str, str], *overrides: str) -> tuple[int, dict | None, str]:
    done = subprocess.run([BEAM, "doctor", "--json", "recipe=lora_16gpu", *overrides], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    if done.stdout.strip():  # nothing on stdout when the controller does not answer
        assert_json_valid("doctor", json.loads(done.stdout))
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr


@pytest.fixture(scope="module")
def env(slurm_sandbox):
    home = slurm_sandbox.new_dir("doctor")
    environment = slurm_sandbox.env({"HOME": str(home), "BEAM_SLURM_CONFIG_DIR": str(home / "config")})
    for name in ("BEAM_SLURM_CLUSTER", "SBATCH_PARTITION", "CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR"):
        environment.pop(name, None)
    return environment


def test_the_values_are_what_scontrol_says_and_low_is_not_broken(slurm_sandbox, env):
    low = slurm_sandbox.partition("low")
    code, found, err = doctor(env, f"cluster.partition={low}")
    assert found is not None, err
    rows = {c["name"]: c for c in found["checks"]}
    conf = scheduler.parse_config(subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True,
                                                 text=True, timeout=60, check=True).stdout)
    assert found["slurm_version"] == conf["SLURM_VERSION"] and conf["SLURM_VERSION"].startswith(
        slurm_sandbox.slurm_version)
    assert found["partition"] == low
    for name, setting in (("kill_wait", "KillWait"), ("min_job_age", "MinJobAge"), ("job_requeue", "JobRequeue"),
                          ("max_array_size", "MaxArraySize"), ("accounting_enforce", "AccountingStorageEnforce"),
                          ("gres", "GresTypes")):
        assert rows[name]["value"] == f"{setting}={conf[setting]}", name
    assert rows["requeue_hold"]["value"] == "cred_expire=10" and "cred_expire=10" in conf["AuthInfo"]
    assert ("MaxBatchRequeue" in conf) == (slurm_sandbox.slurm_version != "22.05")
    assert rows["max_batch_requeue"]["value"].startswith(f"MaxBatchRequeue={conf.get('MaxBatchRequeue', '5')}")
    partition = scheduler.parse_partitions(subprocess.run(["scontrol", "show", "partition", "-o", low], env=env,
                                                          capture_output=True, text=True, timeout=60).stdout)[0]
    assert rows["max_time"]["value"] == f"MaxTime={partition['MaxTime']}"
    notice = rows["preempt_notice"]
    assert f"PreemptMode={partition['PreemptMode']}" in notice["value"] and "GraceTime=20" in notice["value"]
    assert notice["verdict"] != "broken", notice
    assert code == 0 and all(c["verdict"] != "broken" for c in found["checks"]), (err, found["checks"])


def test_a_partition_preempted_without_notice_is_broken_with_its_fix(slurm_sandbox, env):
    code, found, err = doctor(env, "cluster.partition=nonotice")
    assert code == 1 and found is not None, err
    notice = next(c for c in found["checks"] if c["name"] == "preempt_notice")
    assert notice["verdict"] == "broken" and "PreemptMode=CANCEL" in notice["value"]
    signal = "SlurmctldParameters=preempt_send_user_signal" if slurm_sandbox.slurm_version == "22.05" else (
        "PreemptParameters=send_user_signal")
    assert "PreemptMode=REQUEUE on partition nonotice" in notice["fix"] and signal in notice["fix"]


def test_a_daemon_that_does_not_answer_is_named(slurm_sandbox, env, tmp_path):
    host = re.search(r"^SlurmctldHost=\S+?\(([\d.]+)\)", slurm_sandbox.slurm_conf.read_text(), re.M)
    address = host.group(1) if host else "127.0.0.1"
    controller = conf_copy(slurm_sandbox.slurm_conf.parent, tmp_path / "ctl", SlurmctldPort=str(free_port(address)))
    code, found, err = doctor({**env, "SLURM_CONF": str(controller)})
    assert code == 1 and found is None and "Traceback" not in err
    assert err.startswith("beam-slurm doctor: Slurm's controller (slurmctld) did not answer"), err
    accounting = conf_copy(slurm_sandbox.slurm_conf.parent, tmp_path / "dbd", AccountingStoragePort=str(free_port(address)))
    code, found, err = doctor({**env, "SLURM_CONF": str(accounting)})
    assert code == 1 and found is not None and found["unanswered"] == ["slurmdbd"] and "Traceback" not in err
    assert "Slurm's accounting daemon (slurmdbd) did not answer" in err
    assert next(c for c in found["checks"] if c["name"] == "max_submit_jobs")["verdict"] == "degraded"
