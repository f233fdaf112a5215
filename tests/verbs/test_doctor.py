"""`beam-slurm doctor` as a user runs it, with a TEST DOUBLE of `beam_slurm.slurm.site.read` that answers from Slurm's
output as recorded (tests/slurm/fixtures/<version>/) instead of asking Slurm: the table, --json, the exit status,
--write and its refusals, and a Slurm that does not answer. tests/verbs/test_doctor_sandbox.py asks a real Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from beam_slurm.cli import main as beam_slurm
from beam_slurm.config.load import load_config
from beam_slurm.slurm import outage, site
from beam_slurm.slurm.scheduler import SlurmUnreachable

FIXTURES = Path(__file__).resolve().parents[1] / "slurm" / "fixtures"


def recorded(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


@pytest.fixture
def recorded_site(monkeypatch, tmp_path):
    """Answer `site.read` from the 24.11 recordings (the partitions batch, low, high, nonotice); returns the calls."""
    calls: list[tuple] = []
    for name in ("BEAM_SLURM_CLUSTER", "SBATCH_PARTITION", "CKPT_PATH", "EXPORT_PATH", "RUN_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BEAM_SLURM_CONFIG_DIR", str(tmp_path / "config"))

    def read(partition, paths=()):
        calls.append((partition, tuple(paths)))
        return site.from_outputs(
            config=recorded("24.11", "show_config.txt"),
            partitions=recorded("24.11", "show_partition.txt") + recorded("24.11", "show_partition_nonotice.txt"),
            nodes=recorded("24.11", "show_node.txt"), qos=recorded("24.11", "show_qos.txt"), partition=partition,
            client_version=recorded("24.11", "version.txt"))

    monkeypatch.setattr(site, "read", read)
    return calls


def run(capsys, *argv):
    code = beam_slurm(["doctor", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_names_the_version_the_partition_and_every_check(recorded_site, capsys):
    code, out, err = run(capsys, "--json", "recipe=lora_16gpu", "cluster.partition=low")
    found = json.loads(out)
    assert code == 0 and err == "" and found["slurm_version"] == "24.11.5" and found["partition"] == "low"
    assert [c["name"] for c in found["checks"]][:3] == ["slurm_version", "preempt_notice", "requeue_hold"]
    assert all(set(c) == {"name", "value", "verdict", "meaning", "fix"} for c in found["checks"])
    assert {c["verdict"] for c in found["checks"]} <= {"ok", "degraded", "broken"}
    assert found["profile_written"] is None and found["unanswered"] == []
    assert recorded_site[0][0] == "low" and recorded_site[0][1][0].endswith("/ckpts/beam_lora_16gpu")


def test_a_broken_check_exits_1_and_the_table_says_why(recorded_site, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(capsys, "cluster.partition=nonotice")
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith("preempt_notice"))
    assert "broken" in row and "PreemptMode=CANCEL" in row
    assert "broken" in out.splitlines()[-1]  # the count of each verdict closes the table


def test_the_default_partition_when_none_is_named(recorded_site, capsys):
    code, out, _ = run(capsys, "--json")
    assert code == 0 and json.loads(out)["partition"] == "batch" and recorded_site[0][0] is None


def test_a_partition_slurm_does_not_have_is_exit_2(recorded_site, capsys):
    code, out, err = run(capsys, "cluster.partition=gpu")
    assert code == 2 and out == "" and "cluster.partition" in err and "Slurm has no partition 'gpu'" in err


def test_force_without_write_is_exit_2(recorded_site, capsys):
    code, _, err = run(capsys, "--force")
    assert code == 2 and err.startswith("beam-slurm doctor: --force") and not recorded_site


def test_write_keeps_what_the_configuration_tells_and_refuses_to_replace(recorded_site, capsys, tmp_path):
    code, out, _ = run(capsys, "--json", "--write", "mysite", "cluster.partition=low")
    written = tmp_path / "config" / "cluster" / "mysite.yaml"
    assert code == 0 and json.loads(out)["profile_written"] == str(written)
    text = written.read_text()
    assert text.startswith("# @package _global_\n") and "doctor --write mysite" in text
    profile = yaml.safe_load(text)
    assert profile["cluster"] == {"partition": "low"}
    assert profile["site"]["slurm_version"] == "24.11.5" and profile["site"]["requeue_hold_s"] == 11.0
    assert profile["site"]["measured_at"]
    loaded = load_config(["cluster=mysite", "recipe=lora_16gpu"], validate=False)  # what the profile is for
    assert loaded.cluster.partition == "low" and loaded.site.requeue_hold_s == 11.0
    calls = len(recorded_site)
    code, out, err = run(capsys, "--write", "mysite", "cluster.partition=batch")
    assert code == 2 and out == "" and "--force" in err and str(written) in err
    assert len(recorded_site) == calls, "refused before asking Slurm"
    code, _, _ = run(capsys, "--json", "--write", "mysite", "--force", "cluster.partition=batch")
    assert code == 0 and yaml.safe_load(written.read_text())["cluster"] == {"partition": "batch"}


def test_a_controller_that_does_not_answer_is_exit_1_without_a_traceback(monkeypatch, capsys):
    def down(partition, paths=()):
        raise SlurmUnreachable("scontrol show config failed (1): Unable to contact slurm controller",
                               outage.CONTROLLER)

    monkeypatch.setattr(site, "read", down)
    code, out, err = run(capsys, "--json")
    assert code == 1 and out == ""
    assert err.startswith("beam-slurm doctor: Slurm's controller (slurmctld) did not answer") and "Traceback" not in err


def test_an_accounting_daemon_that_does_not_answer_leaves_the_qos_rows_unread(recorded_site, monkeypatch, capsys):
    answered = site.read
    said = "Slurm's accounting daemon (slurmdbd) did not answer (sacctmgr: Connection refused); retry later"

    def without_accounting(partition, paths=()):
        return site.SiteFacts(**{**answered(partition, paths).__dict__, "qos": (), "qos_unread": said,
                                 "unanswered": (outage.ACCOUNTING,)})

    monkeypatch.setattr(site, "read", without_accounting)
    code, out, err = run(capsys, "--json", "cluster.partition=low")
    found = json.loads(out)
    assert code == 1 and found["unanswered"] == ["slurmdbd"] and said in err
    row = next(c for c in found["checks"] if c["name"] == "max_submit_jobs")
    assert row["verdict"] == "degraded" and said in row["meaning"]


def test_help_is_short_and_names_the_flags(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as stop:
        beam_slurm(["doctor", "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and len(out.splitlines()) <= 45
    assert all(flag in out for flag in ("--probe", "--json", "--write NAME", "--force"))


class ProbeDouble:
    """TEST DOUBLE of beam_slurm.launch.site_probe.probe: findings as the probe returns them, without a job."""

    calls: list[str] = []

    @staticmethod
    def probe(cfg, *, say):
        say("probing partition low")
        ProbeDouble.calls.append(cfg.cluster.partition)
        return ProbeDouble()

    def checks(self, cfg=None):
        return [{"name": "queue_wait", "value": "3.0 s", "verdict": "ok", "meaning": "the probe's job started at once",
                 "fix": ""}]

    def profile_values(self, cfg):
        return {"cluster.partition": "low", "site.queue_wait_s": 3.0, "site.measured": ["site.queue_wait_s"]}


def test_probe_adds_its_rows_after_the_configurations_and_its_keys_to_the_profile(recorded_site, capsys, monkeypatch,
                                                                                  tmp_path):
    from beam_slurm.launch import site_probe

    monkeypatch.setattr(site_probe, "probe", ProbeDouble.probe)
    code, out, err = run(capsys, "--probe", "--json", "--write", "probed", "cluster.partition=low")
    found = json.loads(out)
    assert code == 0 and "probing partition low" in err and ProbeDouble.calls == ["low"]
    assert [c["name"] for c in found["checks"]][-1] == "queue_wait" and found["checks"][0]["name"] == "slurm_version"
    site_keys = yaml.safe_load((tmp_path / "config" / "cluster" / "probed.yaml").read_text())["site"]
    assert site_keys["queue_wait_s"] == 3.0 and site_keys["measured"] == ["site.queue_wait_s"]
    assert site_keys["slurm_version"] == "24.11.5", "the configuration's keys stay beside the probe's"


def test_write_refuses_a_name_the_repository_takes_even_with_force(recorded_site, capsys):
    from beam_slurm import CONF_DIR

    taken = sorted(p.stem for p in (CONF_DIR / "cluster").glob("*.yaml"))[0]
    code, out, err = run(capsys, "--write", taken, "--force")
    assert code == 2 and out == "" and "the repository's" in err and taken in err and not recorded_site
