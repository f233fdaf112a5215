"""Which limit a job breaks, from the limits as scontrol and sacctmgr print them (the sandbox test reads them from a
real controller), and where each sbatch setting comes from."""
from __future__ import annotations

from beam_slurm.slurm.limits import AccountingLimits, JobShape, PartitionLimits, job_shape, partition_breaches
from beam_slurm.slurm.submission import SbatchRequest, effective_options, refusal_setting


def shape(nodes=8, gpus=8, time_text="24:00:00", seconds=86400, given=True) -> JobShape:
    return JobShape(nodes=nodes, gpus_per_node=gpus, time_limit_s=seconds, time_limit_text=time_text,
                    time_limit_given=given, time_setting="cluster.time_limit", partitions=("gpu",), qos="",
                    account="")


GPU = PartitionLimits("gpu", max_time_s=4 * 3600, default_time_s=3600, max_nodes=4, total_nodes=16, state="UP")


def test_a_partition_names_each_limit_the_job_breaks_and_the_setting():
    breaches = partition_breaches(shape(), GPU)
    assert [b.setting.split(" ")[0] for b in breaches] == ["cluster.time_limit", "cluster.nodes,"]
    assert "MaxTime 4 h" in breaches[0].text and "PartitionTimeLimit" in breaches[0].text
    assert "MaxNodes 4" in breaches[1].text
    assert partition_breaches(shape(nodes=4, time_text="4:00:00", seconds=4 * 3600), GPU) == []
    # UNLIMITED is over any finite MaxTime; a job that names no limit gets DefaultTime and is never over.
    assert partition_breaches(shape(nodes=4, time_text="UNLIMITED", seconds=None), GPU)
    assert partition_breaches(shape(nodes=4, time_text="", seconds=None, given=False), GPU) == []
    small = PartitionLimits("small", None, None, None, total_nodes=2, state="UP")
    assert "more than partition small has (2)" in partition_breaches(shape(nodes=3), small)[0].text


def test_qos_limits_count_nodes_and_gpus_per_job():
    qos = AccountingLimits("QOS brief", max_wall_s=900, max_tres={"node": 2, "gres/gpu": 8})
    texts = [str(b) for b in qos.breaches(shape(nodes=2, gpus=8, time_text="30:00", seconds=1800), "QOS", "cluster.qos")]
    assert len(texts) == 2 and "MaxWall 15 min" in texts[0] and "16 GPUs" in texts[1], texts
    assert qos.breaches(shape(nodes=1, gpus=8, time_text="15:00", seconds=900), "QOS", "cluster.qos") == []


def test_sbatch_settings_come_from_the_command_line_then_the_variables_then_the_header(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=01:00:00\n#SBATCH -N 2\n#SBATCH --partition=batch # ours\n"
                      "#SBATCH --qos=normal\necho hi\n#SBATCH --account=late\n")
    request = SbatchRequest(script=str(script), options=["--qos=high", "-p", "gpu"])
    found = effective_options(request, {"SBATCH_TIMELIMIT": "30", "SBATCH_PARTITION": "low"})
    assert found["time"] == ("30", "SBATCH_TIMELIMIT")
    assert found["nodes"] == ("2", "the script's #SBATCH header")
    assert found["partition"] == ("gpu", "the command line") and found["qos"] == ("high", "the command line")
    assert "account" not in found  # after the first command sbatch reads no more header lines
    job = job_shape(request, {"SBATCH_TIMELIMIT": "30"})
    assert (job.nodes, job.time_limit_s, job.partitions) == (2, 1800, ("gpu",))
    assert job.time_setting.startswith("SBATCH_TIMELIMIT")


def test_a_node_shape_slurm_has_not_names_what_the_script_asks_for_beside_the_keys(tmp_path):
    script = tmp_path / "prepare_data.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --cpus-per-task=2\n#SBATCH --mem=8G\necho hi\n")
    refused = "allocation failure: Requested node configuration is not available"
    fix = refusal_setting(refused, SbatchRequest(script=str(script), options=["--job-name=data"]), {})
    assert "cluster.nodes" not in fix and "--mem=8G from the script's #SBATCH header" in fix, fix
    assert "prepare_data.sh" in fix and "SBATCH_MEM_PER_NODE" in fix, fix
    keyed = refusal_setting(refused, SbatchRequest(script=str(script), options=["--nodes=4", "--gpus-per-node=8"]), {})
    assert keyed.startswith("cluster.nodes or cluster.gpus_per_node, or what prepare_data.sh asks for") and \
        "--nodes=" not in keyed.split("asks for")[1], keyed
    # sbatch takes SBATCH_MEM_PER_NODE over the header, and so does the refusal's account of it
    from_env = refusal_setting(refused, SbatchRequest(script=str(script)), {"SBATCH_MEM_PER_NODE": "2000M"})
    assert "--mem=2000M from SBATCH_MEM_PER_NODE" in from_env and "--mem=8G" not in from_env, from_env
    assert refusal_setting("invalid partition specified: gpux") == "cluster.partition"
