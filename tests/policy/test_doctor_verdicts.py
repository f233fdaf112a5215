"""doctor's verdicts (beam_slurm.policy.doctor), table-driven, on Slurm's output as recorded from 22.05 and 24.11
(tests/slurm/fixtures/<version>/), changed one setting at a time where a case needs another site."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.policy import doctor
from beam_slurm.slurm import scheduler, site

FIXTURES = Path(__file__).resolve().parents[1] / "slurm" / "fixtures"
VERSIONS = ["22.05", "24.11"]
PATHS = ["paths.model_path=/shared/models/beam", "paths.data_dir=/shared/data", "paths.skyrl_dir=/shared/SkyRL",
         "paths.ckpt_path=/lus/ckpt/run", "paths.export_path=/lus/exports/run"]
REHEARSAL = ("trainer.backend=rehearsal",)  # 2 s steps, nothing to save: fits a 20 s GraceTime
LUSTRE = "10.0.0.1@o2ib:/lus /lus lustre rw,flock 0 0\n"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("MODEL_PATH", "DATA_DIR", "CKPT_PATH", "EXPORT_PATH", "SKYRL_DIR", "RESUME_MODE", "MAX_TRAINING_STEPS",
                "CKPT_INTERVAL", "OPTIMIZER_STATE_DISK_DIR", "RUN_NAME", "BEAM_LOG_DIR", "BEAM_TRAINER_BACKEND",
                "BEAM_REHEARSAL_STEP_SECONDS", "BEAM_SLURM_CLUSTER", "SBATCH_PARTITION", "SBATCH_QOS",
                "SBATCH_TIMELIMIT", "BEAM_CONTAINER_IMAGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/home/alice")


@functools.cache
def recipe(*overrides: str):
    keys = [o.split("=", 1)[0] for o in overrides]
    recipe_given = [] if "recipe" in keys else ["recipe=lora_16gpu"]
    return load_config([*recipe_given, *PATHS, *overrides], validate=False)


def recorded(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


def set_config(config: str, name: str, value: str | None) -> str:
    lines = [line for line in config.splitlines() if line.partition("=")[0].strip() != name]
    return "\n".join(lines + ([f"{name} = {value}"] if value is not None else [])) + "\n"


def facts(version: str, partition: str | None = None, *, config: dict[str, str | None] | None = None,
          partitions: tuple[tuple[str, str], ...] = (), nodes: tuple[tuple[str, str], ...] = (), qos: str | None = None,
          mounts: str = LUSTRE, **given) -> site.SiteFacts:
    """The recorded site of `version`; `config`: settings changed, `partitions`/`nodes`: text replaced."""
    text = recorded(version, "show_config.txt")
    for name, value in (config or {}).items():
        text = set_config(text, name, value)
    partition_text = recorded(version, "show_partition.txt") + recorded(version, "show_partition_nonotice.txt")
    node_text = recorded(version, "show_node.txt")
    for old, new in partitions:
        partition_text = partition_text.replace(old, new)
    for old, new in nodes:
        node_text = node_text.replace(old, new)
    return site.from_outputs(
        config=text, partitions=partition_text, nodes=node_text,
        qos=recorded(version, "show_qos.txt") if qos is None else qos, partition=partition,
        client_version=recorded(version, "version.txt"), mounts=mounts,
        paths={"/lus/ckpt/run": "/lus/ckpt/run", "/lus/exports/run": "/lus/exports/run"}, **given)


def check(name: str, site_facts: site.SiteFacts, cfg) -> doctor.Check:
    found = next(c for c in doctor.checks(site_facts, cfg) if c.name == name)
    assert found.verdict in doctor.VERDICTS and found.meaning
    assert (found.fix != "") == (found.verdict != "ok") or found.name == "checkpoint_filesystem", found
    return found


LOW_GRACE_0 = (("GraceTime=20", "GraceTime=0"),)
LOW_SUSPEND = (("PreemptMode=REQUEUE", "PreemptMode=SUSPEND,GANG"),)
NO_SIGNAL = {"SlurmctldParameters": None, "PreemptParameters": None}
BY_QOS = {"PreemptType": "preempt/qos"}
QOS_PREEMPTED = "normal||requeue|00:00:30|||\nhigh|normal|cluster|00:00:00|||\n"

CASES = [
    # (check, version, partition, site changes, recipe overrides, verdict, words of the meaning or fix)
    ("slurm_version", "22.05", None, {}, (), "degraded", "SLURM_JOB_END_TIME"),
    ("slurm_version", "24.11", None, {}, (), "ok", "SLURM_JOB_END_TIME"),
    ("slurm_version", "24.11", None, {}, ("container.runtime=pyxis",), "ok", "srun returns 1"),
    ("preempt_notice", "22.05", "batch", {}, (), "ok", "not preemptable"),
    ("preempt_notice", "24.11", "batch", {}, (), "ok", "not preemptable"),
    ("preempt_notice", "22.05", "low", {}, REHEARSAL, "ok", "the save fits"),
    ("preempt_notice", "24.11", "low", {}, REHEARSAL, "ok", "the save fits"),
    ("preempt_notice", "24.11", "low", {}, (), "degraded", "a longer GraceTime of partition low"),
    ("preempt_notice", "24.11", "low", {"nodes": (("low,high,", "low,"),)}, (), "ok",
     "no partition of a higher PriorityTier shares its nodes"),
    ("preempt_notice", "22.05", "nonotice", {}, (), "broken", "PreemptMode=REQUEUE on partition nonotice"),
    ("preempt_notice", "24.11", "nonotice", {}, REHEARSAL, "broken", "cancels the job"),
    ("preempt_notice", "22.05", "low", {"partitions": LOW_GRACE_0}, REHEARSAL, "broken", "GraceTime 0"),
    ("preempt_notice", "24.11", "low", {"partitions": LOW_SUSPEND}, REHEARSAL, "degraded", "suspends"),
    ("preempt_notice", "22.05", "low", {"config": NO_SIGNAL}, REHEARSAL, "degraded",
     "SlurmctldParameters=preempt_send_user_signal"),
    ("preempt_notice", "24.11", "low", {"config": NO_SIGNAL}, REHEARSAL, "degraded",
     "PreemptParameters=send_user_signal"),
    ("preempt_notice", "24.11", "low", {"config": NO_SIGNAL}, (), "broken", "do not fit"),
    ("preempt_notice", "24.11", "batch", {"config": BY_QOS, "qos": QOS_PREEMPTED}, REHEARSAL, "ok", "QOS normal"),
    ("preempt_notice", "24.11", "batch", {"config": BY_QOS, "qos": QOS_PREEMPTED},
     ("cluster.qos=high", *REHEARSAL), "ok", "not preemptable"),
    ("preempt_notice", "24.11", "batch", {"config": BY_QOS, "qos_unread": "sacctmgr: down"}, (), "degraded",
     "sacctmgr: down"),
    ("requeue_hold", "22.05", None, {}, (), "ok", "11 s after"),
    ("requeue_hold", "24.11", None, {"config": {"AuthInfo": "socket=/run/munge"}}, (), "ok", "121 s after"),
    ("requeue_hold", "24.11", None, {"config": {"AuthInfo": "cred_expire=1200"}}, (), "degraded", "cred_expire"),
    ("kill_wait", "22.05", None, {}, (), "degraded", "cluster.stop_grace_s=10"),
    ("kill_wait", "24.11", None, {}, ("cluster.stop_grace_s=10",), "ok", "10 s after SIGTERM"),
    ("kill_wait", "24.11", None, {"config": {"KillWait": "60 sec"}}, (), "ok", "60 s after SIGTERM"),
    ("min_job_age", "22.05", None, {}, (), "degraded", "no accounting"),
    ("min_job_age", "24.11", None, {}, (), "ok", "sacct"),
    ("min_job_age", "22.05", None, {"config": {"MinJobAge": "0 sec"}}, (), "ok", "never forgets"),
    ("max_time", "24.11", "low", {}, (), "ok", "partition low has no MaxTime"),
    ("max_time", "24.11", "low", {"partitions": (("MaxTime=UNLIMITED", "MaxTime=00:20:00"),)}, (), "broken",
     "pending for ever"),
    ("max_time", "22.05", "low", {"partitions": (("MaxTime=UNLIMITED", "MaxTime=00:20:00"),),
                                  "config": {"EnforcePartLimits": "ALL"}}, (), "broken", "sbatch refuses it"),
    ("max_time", "22.05", "low", {"partitions": (("MaxTime=UNLIMITED", "MaxTime=00:20:00"),)},
     ("cluster.time_limit=00:15:00",), "ok", "within"),
    ("default_time", "22.05", None, {}, (), "ok", "names its own limit"),
    ("job_requeue", "24.11", None, {}, (), "ok", "requeueable"),
    ("job_requeue", "24.11", None, {"config": {"JobRequeue": "0"}}, (), "ok", "unless they ask"),
    ("max_batch_requeue", "22.05", None, {}, (), "ok", "5 failed launches"),
    ("max_batch_requeue", "24.11", None, {"config": {"MaxBatchRequeue": "0"}}, (), "degraded", "one failed launch"),
    ("no_kill_shrink", "22.05", None, {}, (), "degraded", "23.02.3"),
    ("no_kill_shrink", "24.11", None, {}, (), "ok", "restarts Ray there"),
    ("no_kill_shrink", "22.05", None, {}, ("cluster.max_in_job_attempts=0",), "ok", "restarts Ray there"),
    ("no_kill_shrink", "24.11", None, {"config": {"SLURM_VERSION": "23.02.2"}}, (), "degraded", "23.02.3"),
    ("no_kill_shrink", "24.11", None, {"config": {"SLURM_VERSION": "23.02.3"}}, (), "ok", "restarts Ray there"),
    ("no_kill_shrink", "22.05", None, {}, ("cluster.nodes=1",), "ok", "nothing to shrink"),
    ("no_kill_shrink", "24.11", None, {"config": {"ResumeProgram": "/usr/sbin/resume"}}, (), "ok",
     "ResumeProgram is set"),
    ("accounting_enforce", "22.05", None, {}, (), "ok", "not enforced"),
    ("accounting_enforce", "24.11", None, {}, (), "ok", "limits apply"),
    ("gres", "22.05", None, {}, (), "broken", "GresTypes=gpu"),  # recorded from a controller without GPUs
    ("gres", "22.05", None, {}, ("cluster.gpus_per_node=0",), "ok", "no GPUs"),
    ("gres", "24.11", None, {}, (), "ok", "generic resources"),
    ("gpus_per_node", "24.11", None, {}, (), "ok", "4 nodes"),
    ("gpus_per_node", "22.05", None, {}, ("cluster.gpus_per_node=16",), "broken", "cluster.gpus_per_node=8"),
    ("gpus_per_node", "22.05", None, {}, ("cluster.nodes=5",), "broken", "has 4 such nodes"),
    ("gpus_per_node", "24.11", None, {}, ("cluster.nodes=3", "cluster.spare_nodes=2"), "broken", "5 nodes"),
    ("gpus_per_node", "24.11", None, {}, ("cluster.gpus_per_node=4",), "degraded", "cluster.gpus_per_node=8"),
    ("gpus_per_node", "24.11", None, {"nodes": (("Gres=gpu:8", "Gres=gpu:h100:4(S:0)"),)}, (), "broken",
     "cluster.gpus_per_node=4"),
    ("local_disk", "24.11", None, {}, (), "ok", "LoRA rank 64"),
    ("local_disk", "24.11", None, {}, ("recipe=bf16_64gpu", "cluster.nodes=4"), "degraded", "TmpDisk=0"),
    ("local_disk", "24.11", None, {"nodes": (("TmpDisk=0", "TmpDisk=100000"),)},
     ("recipe=bf16_64gpu", "cluster.nodes=4"), "degraded", "/scratch/optimizer_state"),
    ("local_disk", "24.11", None, {"nodes": (("TmpDisk=0", "TmpDisk=100000"),)},
     ("recipe=bf16_64gpu", "cluster.nodes=4", "paths.optimizer_state_disk_dir=/tmp/opt"), "broken", "0.10 TB"),
    ("local_disk", "22.05", None, {"nodes": (("TmpDisk=0", "TmpDisk=2000000"),)},
     ("recipe=bf16_64gpu", "cluster.nodes=4", "paths.optimizer_state_disk_dir=/tmp/opt"), "ok", "2.10 TB"),
    ("local_disk", "24.11", None, {}, ("recipe=bf16_64gpu", "cluster.nodes=4", "paths.optimizer_state_disk_dir="),
     "degraded", "host memory"),
    ("checkpoint_filesystem", "24.11", None, {}, (), "ok", "holds across nodes"),
    ("checkpoint_filesystem", "24.11", None, {"mounts": LUSTRE.replace("flock", "localflock")}, (), "degraded",
     "one node only"),
    ("checkpoint_filesystem", "24.11", None, {"mounts": "b /lus beegfs rw 0 0\n"}, (), "degraded",
     "tuneUseGlobalFileLocks"),
    ("checkpoint_filesystem", "24.11", None, {"mounts": "n:/lus /lus nfs4 rw,vers=4.2 0 0\n"}, (), "ok", "NFS"),
    ("checkpoint_filesystem", "24.11", None, {"mounts": "n:/lus /lus nfs rw,local_lock=flock 0 0\n"}, (),
     "degraded", "local locks"),
    ("checkpoint_filesystem", "24.11", None, {"mounts": "/dev/vda / ext4 rw 0 0\n"}, (), "degraded",
     "storage every node mounts"),
    ("checkpoint_filesystem", "24.11", None, {"mounts": ""}, (), "degraded", "could not be read"),
    ("max_array_size", "24.11", None, {}, (), "ok", "array of 5 tasks"),
    ("max_array_size", "24.11", None, {"config": {"MaxArraySize": "0"}}, (), "broken", "disabled"),
    ("max_array_size", "22.05", None, {"config": {"MaxArraySize": "4"}}, (), "degraded", "checkpoint.max_to_keep=4"),
    ("max_array_size", "24.11", None, {"config": {"SchedulerParameters": "max_array_tasks=2"}}, (), "degraded",
     "over the 2"),
    ("max_submit_jobs", "22.05", None, {}, (), "ok", "without accounting"),
    ("max_submit_jobs", "24.11", None, {}, (), "ok", "no limit"),
    ("max_submit_jobs", "24.11", None, {"qos": "normal||cluster|00:00:00|6||\n"}, (), "degraded", "over the 6"),
    ("max_submit_jobs", "24.11", None, {"qos": "normal||cluster|00:00:00||6|\n"}, (), "degraded", "over the 6"),
    ("max_submit_jobs", "24.11", None, {"qos": "normal||cluster|00:00:00|100||\n"}, (), "ok", "12 points"),
    ("max_submit_jobs", "24.11", None, {"qos": "normal||cluster|00:00:00|6||\n",
                                        "config": {"AccountingStorageEnforce": "associations"}}, (), "ok",
     "not enforced"),
    ("max_submit_jobs", "24.11", None, {"qos_unread": "slurmdbd down"}, (), "degraded", "slurmdbd down"),
    ("container_runtime", "24.11", None, {}, (), "ok", "no container"),
    ("container_runtime", "24.11", None, {"plugstack_path": "/etc/slurm/plugstack.conf",
                                          "plugstack_text": "required /usr/lib/slurm/spank_pyxis.so\n",
                                          "programs": {"enroot": "/usr/bin/enroot"}},
     ("container.runtime=pyxis",), "ok", "srun returns 1"),
    ("container_runtime", "22.05", None, {"plugstack_path": "/etc/slurm/plugstack.conf",
                                          "plugstack_text": "required /usr/lib/slurm/spank_pyxis.so\n"},
     ("container.runtime=pyxis",), "ok", "SPANK plugin of this cluster"),
    ("container_runtime", "24.11", None, {"plugstack_text": ""}, ("container.runtime=pyxis",), "broken",
     "--container-image"),
    ("container_runtime", "24.11", None, {"plugstack_why": "denied"}, ("container.runtime=pyxis",), "degraded",
     "denied"),
    ("container_runtime", "24.11", None, {}, ("container.runtime=apptainer",), "degraded", "apptainer"),
    ("container_runtime", "24.11", None, {"programs": {"apptainer": "/usr/bin/apptainer"}},
     ("container.runtime=apptainer",), "ok", "found on PATH"),
]


@pytest.mark.parametrize("name, version, partition, changes, overrides, verdict, words", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[5]}-{i}" for i, c in enumerate(CASES)])
def test_each_verdict(name, version, partition, changes, overrides, verdict, words):
    found = check(name, facts(version, partition, **changes), recipe(*overrides))
    assert found.verdict == verdict, found
    assert words in found.meaning + " " + found.fix, found


def test_every_check_has_cases_of_its_verdicts():
    names = {c.__name__ for c in doctor.CHECKS}
    assert {case[0] for case in CASES} == names
    for name in names:  # each check is seen both ways where it can be more than ok
        verdicts = {case[5] for case in CASES if case[0] == name}
        assert "ok" in verdicts and (len(verdicts) > 1 or name in {"default_time", "job_requeue",
                                                                  "accounting_enforce"}), name


@pytest.mark.parametrize("version", VERSIONS)
def test_the_values_are_what_slurm_says(version):
    """Each value a check reports is the setting as `scontrol show config` (or the partition, the nodes) prints it."""
    conf = scheduler.parse_config(recorded(version, "show_config.txt"))
    rows = {c.name: c for c in doctor.checks(facts(version, "low"), recipe())}
    assert rows["slurm_version"].value == conf["SLURM_VERSION"]
    for name, setting in (("kill_wait", "KillWait"), ("min_job_age", "MinJobAge"), ("job_requeue", "JobRequeue"),
                          ("max_array_size", "MaxArraySize"), ("accounting_enforce", "AccountingStorageEnforce"),
                          ("gres", "GresTypes")):
        assert rows[name].value == f"{setting}={conf[setting]}", name
    assert rows["requeue_hold"].value in conf["AuthInfo"].split(",")
    assert rows["no_kill_shrink"].value == f"SLURM_VERSION={conf['SLURM_VERSION']}"
    if "MaxBatchRequeue" in conf:
        assert rows["max_batch_requeue"].value == f"MaxBatchRequeue={conf['MaxBatchRequeue']}"
    low = next(p for p in scheduler.parse_partitions(recorded(version, "show_partition.txt"))
               if p["PartitionName"] == "low")
    assert rows["max_time"].value == f"MaxTime={low['MaxTime']}"
    assert rows["default_time"].value == f"DefaultTime={low['DefaultTime']}"
    assert f"GraceTime={low['GraceTime']}" in rows["preempt_notice"].value
    assert f"PreemptMode={low['PreemptMode']}" in rows["preempt_notice"].value
    node = scheduler.parse_partitions(recorded(version, "show_node.txt"))[0]
    assert rows["gpus_per_node"].value == f"Gres={node['Gres']}"
    assert rows["local_disk"].value == f"TmpDisk={node['TmpDisk']}, TmpFS={conf['TmpFS']}"


def test_the_worst_verdict_decides_the_exit_status():
    ok = doctor.Check("a", "x", "ok", "m")
    degraded = doctor.Check("b", "x", "degraded", "m", "f")
    broken = doctor.Check("c", "x", "broken", "m", "f")
    assert doctor.worst([]) == "ok" and doctor.exit_status([ok, degraded]) == 0
    assert doctor.worst([broken, ok, degraded]) == "broken" and doctor.exit_status([ok, broken]) == 1
    assert doctor.exit_status(doctor.checks(facts("24.11", "nonotice"), recipe())) == 1
    assert doctor.exit_status(doctor.checks(facts("24.11", "low"), recipe())) == 0


def test_the_profile_keeps_what_the_configuration_tells():
    values = doctor.profile_values(facts("24.11", "low"), "2026-12-05T23:00:00+00:00")
    assert values == {"cluster.partition": "low", "site.measured_at": "2026-12-05T23:00:00+00:00",
                      "site.slurm_version": "24.11.5", "site.requeue_hold_s": 11.0}
