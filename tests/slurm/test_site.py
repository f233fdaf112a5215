"""What `beam-slurm doctor` reads of a site (beam_slurm.slurm.site), from Slurm's output as recorded on this machine
(tests/slurm/fixtures/<version>/: show_config.txt, show_partition.txt, show_node.txt, show_qos.txt, ...): which
partition and nodes, the settings, and the answers that differ between releases."""

from __future__ import annotations

from pathlib import Path

import pytest

from beam_slurm.core.errors import ConfigError
from beam_slurm.slurm import scheduler, site

FIXTURES = Path(__file__).with_name("fixtures")
VERSIONS = ["22.05", "24.11"]


def recorded(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


def with_setting(config: str, name: str, value: str | None) -> str:
    """`scontrol show config` text with `name` set to `value` (added when absent; removed for None)."""
    lines = [line for line in config.splitlines() if line.partition("=")[0].strip() != name]
    return "\n".join(lines + ([f"{name} = {value}"] if value is not None else [])) + "\n"


def facts(version: str, partition: str | None = None, *, config: str | None = None, **given) -> site.SiteFacts:
    partitions = recorded(version, "show_partition.txt") + recorded(version, "show_partition_nonotice.txt")
    return site.from_outputs(
        config=config if config is not None else recorded(version, "show_config.txt"),
        partitions=partitions,
        nodes=recorded(version, "show_node.txt"),
        qos=recorded(version, "show_qos.txt"),
        partition=partition,
        client_version=recorded(version, "version.txt"),
        **given,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_the_partition_is_the_one_named_else_the_default(version):
    assert facts(version).partition_name == "batch"
    assert facts(version, "low").partition_name == "low"
    assert facts(version, "nonotice,batch").partition_name == "nonotice", "a list: the first"
    with pytest.raises(ConfigError) as refused:
        facts(version, "gpu")
    assert refused.value.problems[0].key == "cluster.partition" and "'gpu'" in str(refused.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_nodes_are_those_of_the_partition_with_their_gpus_and_disk(version):
    low = facts(version, "low")
    assert [n.name for n in low.nodes] == ["n1", "n2", "n3", "n4"]
    assert {(n.gres, n.gpus, n.tmp_disk_mb, n.real_memory_mb) for n in low.nodes} == {("gpu:8", 8, 0, 8000)}
    assert facts(version, "nonotice").nodes == low.nodes
    only_low = recorded(version, "show_node.txt").replace("Partitions=batch,low,", "Partitions=low,", 1)
    assert len(site.parse_nodes(only_low, "batch")) == 3


@pytest.mark.parametrize("gres, gpus", [
    ("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:a100:4,gpu:v100:2", 6), ("(null)", 0), ("shard:8,gpu:4", 4),
])
def test_gpus_of_a_gres(gres, gpus):
    assert site.NodeFacts("n", gres, 0, 0, "IDLE").gpus == gpus


@pytest.mark.parametrize("version", VERSIONS)
def test_the_settings_are_read_as_slurm_prints_them(version):
    found = facts(version, "low")
    conf = scheduler.parse_config(recorded(version, "show_config.txt"))
    assert found.version == conf["SLURM_VERSION"] and found.version.startswith(version)
    assert found.client_release == recorded(version, "version.txt").split()[1]
    assert found.seconds("KillWait") == 10 and found.seconds("MinJobAge") == 300
    assert found.number("MaxArraySize") == 1001
    assert found.cred_expire_text == "cred_expire=10" and found.cred_expire_s == 10 and found.requeue_hold_s == 11
    assert found.preemption.partition == "low" and found.preemption.grace_s() == 20 and found.preemption.user_signal
    assert [q.name for q in found.qos] == ["normal", "brief"]


@pytest.mark.parametrize("auth, window", [
    ("socket=/run/munge.socket", 120), ("socket=/x,cred_expire=600", 600), ("cred_expire=3", 120), ("(null)", 120),
])
def test_the_credential_window_is_slurms_default_when_unset_or_refused(auth, window):
    config = with_setting(recorded("24.11", "show_config.txt"), "AuthInfo", auth)
    assert facts("24.11", config=config).cred_expire_s == window


def test_what_differs_between_releases():
    old, new = facts("22.05"), facts("24.11")
    assert not old.job_end_time_in_env and new.job_end_time_in_env
    assert not old.spank_failure_fails_step and new.spank_failure_fails_step
    assert not old.no_kill_keeps_resources and new.no_kill_keeps_resources
    assert old.user_signal_setting == "SlurmctldParameters=preempt_send_user_signal"
    assert new.user_signal_setting == "PreemptParameters=send_user_signal"
    assert old.user_signal_given == "SlurmctldParameters=preempt_send_user_signal"
    assert new.user_signal_given == "PreemptParameters=send_user_signal"
    # 22.05 prints no MaxBatchRequeue: it was the constant 5 until 23.02 made it a setting.
    assert old.max_batch_requeue == 5 and "fixed" in old.max_batch_requeue_text
    assert new.max_batch_requeue == 5 and new.max_batch_requeue_text == "MaxBatchRequeue=5"
    config = recorded("24.11", "show_config.txt")
    for release, keeps in (("23.02.2", False), ("23.02.3", True)):
        changed = facts("24.11", config=with_setting(config, "SLURM_VERSION", release))
        assert changed.no_kill_keeps_resources is keeps and changed.job_end_time_in_env
        assert not changed.spank_failure_fails_step


def test_accounting_and_its_limits():
    old, new = facts("22.05"), facts("24.11")
    assert not old.accounting and not old.limits_enforced  # the 22.05 recording has no slurmdbd
    assert new.accounting and new.limits_enforced
    safe = facts("24.11", config=with_setting(recorded("24.11", "show_config.txt"), "AccountingStorageEnforce", "safe"))
    assert safe.limits_enforced


def test_qos_limits_and_scheduler_parameters():
    qos = site.parse_qos("normal||cluster|00:00:00|40|100|\nlong|normal|requeue|00:05:00||||\n")
    assert qos[0] == site.QosFacts("normal", 40, 100, None) and qos[1] == site.QosFacts("long", None, None, None)
    parameters = "bf_interval=5,max_array_tasks=9"
    config = with_setting(recorded("24.11", "show_config.txt"), "SchedulerParameters", parameters)
    found = facts("24.11", config=config)
    assert found.scheduler_parameter("max_array_tasks") == "9" and found.scheduler_parameter("bf_interval") == "5"
    assert found.scheduler_parameter("nohold_on_prolog_fail") is None


MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
10.0.0.1@o2ib:/lus /lus lustre rw,flock,lazystatfs 0 0
10.0.0.1@o2ib:/scratch /lus/scratch lustre rw,localflock 0 0
beegfs_nodev /mnt/beegfs beegfs rw,relatime 0 0
nfs:/home /home nfs4 rw,vers=4.2,local_lock=none 0 0
/dev/nvme0n1 /mnt/my\\040disk xfs rw 0 0
"""


@pytest.mark.parametrize("path, point, fs_type, source", [
    ("/lus/run/ckpt", "/lus", "lustre", "lustre at /lus (flock)"),
    ("/lus/scratch/a", "/lus/scratch", "lustre", "lustre at /lus/scratch (localflock)"),
    ("/lus/scratchy", "/lus", "lustre", "lustre at /lus (flock)"),
    ("/mnt/beegfs", "/mnt/beegfs", "beegfs", "beegfs at /mnt/beegfs"),
    ("/home/alice", "/home", "nfs4", "nfs4 at /home (local_lock=none)"),
    ("/mnt/my disk/x", "/mnt/my disk", "xfs", "xfs at /mnt/my disk"),
    ("/var/tmp", "/", "ext4", "ext4 at /"),
])
def test_the_file_system_of_a_folder_is_its_longest_mount_point(path, point, fs_type, source):
    (found,) = site.storage_of(MOUNTS, {"given": path})
    assert (found.path, found.mount_point, found.fs_type, found.source) == ("given", point, fs_type, source)


def test_the_nearest_existing_folder_resolves_links(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert site.nearest_existing(str(tmp_path / "link" / "not" / "yet")) == str((tmp_path / "real").resolve())


def test_the_spank_plugins_are_read_with_their_includes(tmp_path):
    (tmp_path / "plugstack.conf.d").mkdir()
    (tmp_path / "plugstack.conf").write_text("# pyxis below\ninclude plugstack.conf.d/*.conf\n")
    (tmp_path / "plugstack.conf.d" / "pyxis.conf").write_text("required /usr/lib/slurm/spank_pyxis.so\n")
    path, text, why = site.plugstack({"PlugStackConfig": "(null)", "SLURM_CONF": str(tmp_path / "slurm.conf")})
    assert path == str(tmp_path / "plugstack.conf") and why == ""
    assert facts("24.11", plugstack_path=path, plugstack_text=text).pyxis_listed
    (tmp_path / "plugstack.conf.d" / "pyxis.conf").write_text("# required /usr/lib/slurm/spank_pyxis.so\n")
    assert not facts("24.11", plugstack_text=site.plugstack({"PlugStackConfig": path})[1]).pyxis_listed
    assert site.plugstack({"PlugStackConfig": str(tmp_path / "none.conf")})[1:] == ("", ""), "no file: no plugin"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_partitions_that_may_preempt_are_those_of_a_higher_tier_on_its_nodes(version):
    assert facts(version, "low").higher_tiers == ("high",)
    assert facts(version, "nonotice").higher_tiers == ("high",)
    assert facts(version, "high").higher_tiers == ()
    nodes = recorded(version, "show_node.txt").replace("low,high,", "low,")
    rows = scheduler.parse_partitions(recorded(version, "show_partition.txt"))
    low = next(r for r in rows if r["PartitionName"] == "low")
    assert site.higher_tiers(rows, low, nodes) == ()
