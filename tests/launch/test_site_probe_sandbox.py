"""`doctor --probe`'s measuring jobs (beam_slurm.launch.site_probe) on the Slurm sandbox: a whole probe measures the
signal's lead, the requeue hold, both write speeds and the queue wait, and leaves no job and no folder; a probe
interrupted (Ctrl-C, SIGTERM) or out of time cancels every job it queued."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.config.overrides import override
from beam_slurm.launch import site_probe
from beam_slurm.policy.site_probe import CHECK_NAMES

pytestmark = [pytest.mark.sandbox, pytest.mark.slurm_semantics]

PROBE_CODE = """
import sys
from beam_slurm.config.load import load_config
from beam_slurm.launch.site_probe import probe
probe(load_config(sys.argv[1:], validate=False), say=lambda line: print(line, flush=True), timeout_s=120)
"""


@pytest.fixture
def probe_recipe(slurm_sandbox, monkeypatch):
    """Overrides putting the probe on this session's batch partition, its files on the sandbox's shared folder."""
    for name in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "OPTIMIZER_STATE_DISK_DIR",
                 "BEAM_SLURM_CLUSTER", "SBATCH_PARTITION", "SBATCH_ACCOUNT", "SBATCH_QOS", "SBATCH_TIMELIMIT",
                 "SBATCH_MEM_PER_NODE", "SBATCH_GPUS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    root = slurm_sandbox.new_dir("site-probe")
    overrides = [override("cluster.partition", slurm_sandbox.partition("batch")),
                 override("paths.ckpt_path", f"{root}/ckpts/run"), override("paths.export_path", f"{root}/exports/run"),
                 "trainer.backend=rehearsal"]
    return root, overrides


def job_ids(lines: list[str]) -> list[str]:
    """The jobs the probe said it submitted."""
    said = next(line for line in lines if line.startswith("submitted:"))
    return re.findall(r"job (\d+)", said)


def active(slurm_sandbox, ids: list[str]) -> dict[str, str]:
    """Those of the jobs squeue still shows queued or running (state by id)."""
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%A %T"], capture_output=True, text=True,
                         env=slurm_sandbox.env(), timeout=60, check=True).stdout
    states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    return {job: states[job] for job in ids if states.get(job, "") not in ("", "COMPLETED", "CANCELLED", "FAILED",
                                                                           "TIMEOUT")}


def cred_expire_s(slurm_sandbox) -> int:
    """The sandbox's job-credential window, from the controller's running configuration."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, env=slurm_sandbox.env(),
                         timeout=60, check=True).stdout
    auth = next(line for line in out.splitlines() if line.startswith("AuthInfo"))
    found = re.search(r"cred_expire=(\d+)", auth)
    return int(found.group(1)) if found else 120


def test_a_probe_measures_the_notice_the_requeue_hold_and_the_storage(slurm_sandbox, probe_recipe):
    root, overrides = probe_recipe
    cfg = load_config(overrides, validate=False)
    lines: list[str] = []
    began = time.monotonic()
    findings = site_probe.probe(cfg, say=lines.append, timeout_s=170)
    took = time.monotonic() - began
    record = json.dumps({"took_s": round(took, 1), **findings.__dict__}, default=str)
    print(f"probe on Slurm {slurm_sandbox.slurm_version}: {record}")
    assert lines[0].startswith("doctor --probe submits 3 jobs of 1 node each") and "no GPUs" in lines[0]
    assert findings.problems == (), (findings.problems, lines)
    asked = findings.signal_asked_s
    assert findings.signal_lead_s is not None and asked - 3 <= findings.signal_lead_s <= asked + 65, record
    assert findings.signal_early_s == pytest.approx(findings.signal_lead_s - asked)
    # Slurm sets a requeued job's begin time to the requeue + cred_expire + 1 s; read to the second from scontrol's
    # SubmitTime (reset at the requeue) and EligibleTime, that is cred_expire or cred_expire + 1 (both seen on
    # 22.05 and 24.11 with cred_expire=10). It runs again at the scheduler's next pass after that (16 to 35 s here).
    window = cred_expire_s(slurm_sandbox)
    assert findings.requeue_hold_s is not None and window - 1 <= findings.requeue_hold_s <= window + 2, record
    assert findings.requeue_restart_s is not None
    assert findings.requeue_hold_s - 1 <= findings.requeue_restart_s <= findings.requeue_hold_s + 90, record
    assert findings.shared_write_gbytes_per_s and findings.shared_write_gbytes_per_s > 0, record
    assert findings.local_write_gbytes_per_s and findings.local_write_gbytes_per_s > 0, record
    assert findings.queue_wait_s is not None and 0 <= findings.queue_wait_s < 120, record
    assert findings.partition == slurm_sandbox.partition("batch")
    rows = {row["name"]: row for row in findings.checks(cfg)}
    assert list(rows) == list(CHECK_NAMES)
    assert rows["signal_lead_measured"]["verdict"] == rows["requeue_hold_measured"]["verdict"] == "ok", rows
    values = findings.profile_values(cfg)
    assert values["site.requeue_hold_s"] == findings.requeue_hold_s and "cluster.signal_before_s" in values
    assert active(slurm_sandbox, job_ids(lines)) == {}
    assert not (root / "exports" / site_probe.PROBE_FOLDER).exists()  # removed: nothing failed
    assert [p.name for p in (root / "ckpts").iterdir()] == []  # the write test's folder too


def test_an_interrupted_probe_cancels_its_jobs(slurm_sandbox, probe_recipe):
    root, overrides = probe_recipe
    lines: list[str] = []

    def interrupt_once_submitted(line: str) -> None:
        lines.append(line)
        if line.startswith("submitted:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        site_probe.probe(load_config(overrides, validate=False), say=interrupt_once_submitted, timeout_s=120)
    ids = job_ids(lines)
    assert len(ids) == 3 and active(slurm_sandbox, ids) == {}, lines
    assert any(line.startswith("cancelled probe job(s)") for line in lines), lines
    assert (root / "exports" / site_probe.PROBE_FOLDER).is_dir()  # kept: the probe did not finish


def test_a_probe_stopped_with_sigterm_cancels_its_jobs(slurm_sandbox, probe_recipe):
    _, overrides = probe_recipe
    process = subprocess.Popen([sys.executable, "-c", PROBE_CODE, *overrides], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=slurm_sandbox.env())
    lines: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line.strip())
        if line.startswith("submitted:"):
            process.send_signal(signal.SIGTERM)
            break
    out, _ = process.communicate(timeout=120)
    lines += out.splitlines()
    assert process.returncode != 0, lines
    ids = job_ids(lines)
    assert len(ids) == 3 and active(slurm_sandbox, ids) == {}, lines
    assert any(line.startswith("cancelled probe job(s)") for line in lines), lines
    assert "ProbeInterrupted" in "\n".join(lines)


def test_a_probe_out_of_time_cancels_its_jobs_and_says_what_is_missing(slurm_sandbox, probe_recipe):
    _, overrides = probe_recipe
    lines: list[str] = []
    # Out of time before the requeued job can run again (its hold alone is cred_expire + 1 s). The signal job's
    # USR1 may come at once (Slurm sends it up to 60 s early), so it is not the one asserted on.
    findings = site_probe.probe(load_config(overrides, validate=False), say=lines.append, timeout_s=3)
    ids = job_ids(lines)
    assert len(ids) == 3 and active(slurm_sandbox, ids) == {}, lines
    assert findings.requeue_restart_s is None, findings
    assert any(p.startswith("requeue_hold_measured: job ") and p.endswith("when the probe's time ran out")
               for p in findings.problems), findings
