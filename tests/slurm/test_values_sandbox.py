"""Our reading of `--time` against Slurm's own: held jobs submitted with each form, and the TimeLimit scontrol reports
for them (Slurm rounds seconds up to the minute). Nothing runs: the jobs are held, then cancelled."""
from __future__ import annotations

import json

import pytest

from beam_slurm.slurm.values import reported_seconds, time_limit_seconds

pytestmark = [pytest.mark.sandbox, pytest.mark.slurm_semantics]

FORMS = ["30:00", "90", "45", "0:30", "4:00", "0:04:00", "1:30:00", "1-00", "2-12", "1-2:30", "1-00:00:01", "120:00"]


def test_time_limits_read_as_slurm_reads_them(slurm_sandbox):
    jobs = {form: slurm_sandbox.sbatch("#!/bin/bash\ntrue\n", "--hold", f"--time={form}", "--nodes=1")
            for form in FORMS}
    try:
        reported = {form: slurm_sandbox.scontrol_job(job)["TimeLimit"] for form, job in jobs.items()}
    finally:
        for job in jobs.values():
            slurm_sandbox.cancel(job)
    ours = {form: time_limit_seconds(form) for form in FORMS}
    slurms = {form: reported_seconds(text) for form, text in reported.items()}
    assert ours == slurms, {form: (ours[form], reported[form]) for form in FORMS if ours[form] != slurms[form]}


def wait_reason(slurm_sandbox, job: str, expected: str, timeout_s: float = 60) -> str:
    """The pending job's Reason once it is `expected` (the first pass may say PartitionConfig), or the last seen."""
    import time

    deadline = time.monotonic() + timeout_s
    reason = ""
    while time.monotonic() < deadline:
        reason = slurm_sandbox.scontrol_job(job).get("Reason", "")
        if reason == expected:
            break
        time.sleep(1)
    return reason


def test_limits_that_sbatch_takes_but_never_starts_are_refused_before_queueing(slurm_sandbox, capsys, tmp_path):
    """The sandbox's `short` partition (MaxTime 20 min, EnforcePartLimits=NO) and `brief` QOS (MaxWall 15 min,
    AccountingStorageEnforce=limits, no DenyOnLimit): sbatch --test-only takes a job over them, Slurm then keeps it
    pending for ever (checked with real jobs), and plan and submit's dry run say so first, naming the setting."""
    from beam_slurm.verbs import submit as submit_mod
    from beam_slurm.verbs.plan import main as plan_main

    script = "#!/bin/bash\ntrue\n"
    over_partition = slurm_sandbox.sbatch(script, "--partition=short", "--time=1:00:00", "--nodes=1")
    over_qos = slurm_sandbox.sbatch(script, "--qos=brief", "--time=30:00", "--nodes=1")
    try:
        assert wait_reason(slurm_sandbox, over_partition, "PartitionTimeLimit") == "PartitionTimeLimit"
        assert wait_reason(slurm_sandbox, over_qos, "QOSMaxWallDurationPerJobLimit") == "QOSMaxWallDurationPerJobLimit"
    finally:
        slurm_sandbox.cancel(over_partition)
        slurm_sandbox.cancel(over_qos)

    keys = ["recipe=lora_16gpu", "trainer.backend=rehearsal", "cluster.check_paths_on_submit=false",
            "cluster.allow_no_checkpoint=true", f"paths.data_dir={tmp_path}", f"paths.model_path={tmp_path}"]
    def slurm_rows(*given: str) -> tuple[int, dict[str, str]]:
        code = plan_main([*keys, *given, "--json"])
        rows = json.loads(capsys.readouterr().out)["rows"]
        return code, {row["item"]: row["text"] for row in rows if row["section"] == "slurm"}

    code, rows = slurm_rows("cluster.partition=short", "cluster.time_limit=1:00:00")
    limit = rows["limits"]
    assert code == 2 and limit.startswith("NEVER STARTS") and "MaxTime 20 min" in limit, rows
    assert "PartitionTimeLimit" in limit and "cluster.time_limit to at most 20 min" in limit, rows
    assert "DefaultTime 10 min" in rows["partition short"], rows
    # Refused at once for a node count over MaxNodes: the limits row still names the partition's limit.
    code, rows = slurm_rows("cluster.partition=short", "cluster.nodes=4", "cluster.time_limit=20:00")
    assert code == 2 and rows["sbatch --test-only"].startswith("REFUSED"), rows
    assert "4 nodes are over partition short's MaxNodes 2" in rows["limits"], rows
    code, rows = slurm_rows("cluster.partition=short", "cluster.time_limit=20:00")
    assert code == 0 and rows["limits"] == "within the partition's limits and the QOS's and association's", rows
    # A list of partitions: the job starts in the first that can take it, so it is not refused.
    code, rows = slurm_rows("cluster.partition='short,batch'", "cluster.time_limit=1:00:00")
    assert code == 0, rows

    code = submit_mod.main(["--dry-run", "--stages", "train", *keys, "cluster.qos=brief", "cluster.time_limit=30:00"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "Slurm would never start the train job" in err, err
    assert "QOS brief's MaxWall 15 min" in err and "QOSMaxWallDurationPerJobLimit" in err, err
    assert "cluster.time_limit to at most 15 min, or cluster.qos" in err, err
    code = submit_mod.main(["--dry-run", "--stages", "train", *keys, "cluster.qos=brief", "cluster.time_limit=15:00"])
    assert code == 0, capsys.readouterr().err


def test_sbatch_partition_is_the_partition_plan_asks_slurm_about(slurm_sandbox, capsys, monkeypatch, tmp_path):
    """SBATCH_PARTITION pointing at the preemptable partition: plan reads that partition's preemption, and Slurm is
    asked about a job in it, as sbatch would place it."""
    from beam_slurm.verbs.plan import main as plan_main

    low = slurm_sandbox.partition("low")
    monkeypatch.setenv("SBATCH_PARTITION", low)
    code = plan_main(["recipe=lora_16gpu", "trainer.backend=rehearsal", "cluster.check_paths_on_submit=false",
                      f"paths.data_dir={tmp_path}", f"paths.model_path={tmp_path}", "--json"])
    rows = {row["item"]: row["text"] for row in json.loads(capsys.readouterr().out)["rows"]}
    assert code == 0, rows
    assert rows["partition / account / qos"].startswith(f"{low} (from SBATCH_PARTITION)"), rows
    assert rows["preemption"].startswith(f"partition {low}, PreemptMode=REQUEUE"), rows
    assert rows["sbatch --test-only"].startswith("accepted") and f"in partition {low}" in rows["sbatch --test-only"], rows
