"""Real jobs on the sandbox cluster: multi-node placement, fake GPUs, accounting, signals and preemption."""
from __future__ import annotations

import ipaddress
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

SANDBOX_SUBNET = ipaddress.ip_network("10.77.0.0/24")


def wait_for_file_text(path, needle: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if needle in text:
            return text
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} not in {path} after {timeout:.0f} s; it holds:\n"
                         f"{path.read_text() if path.exists() else '(missing)'}")


def test_two_node_job_sees_own_hosts_ips_and_eight_gpus(slurm_sandbox):
    work = slurm_sandbox.new_dir("two-node")
    script = f"""#!/bin/bash
#SBATCH --job-name=two-node --nodes=2 --ntasks-per-node=1 --gres=gpu:8 --mem=200 --time=2
#SBATCH --output={work}/slurm-%j.out
srun bash -c 'echo "TASK $SLURM_PROCID $(hostname) $(hostname -I | cut -d " " -f 1) $CUDA_VISIBLE_DEVICES"' > {work}/tasks.txt
"""
    job_id = slurm_sandbox.sbatch(script)
    assert slurm_sandbox.wait(job_id, timeout=180) == "COMPLETED", (work / f"slurm-{job_id}.out").read_text()

    lines = [line.split() for line in (work / "tasks.txt").read_text().splitlines() if line.startswith("TASK")]
    assert len(lines) == 2, lines
    hostnames = {fields[2] for fields in lines}
    ips = {fields[3] for fields in lines}
    assert len(hostnames) == 2 and hostnames <= set(slurm_sandbox.nodes), lines
    assert len(ips) == 2 and all(ipaddress.ip_address(ip) in SANDBOX_SUBNET for ip in ips), lines
    assert {slurm_sandbox.node_ips[fields[2]] for fields in lines} == ips, "each task runs with its node's own IP"
    assert all(fields[4] == "0,1,2,3,4,5,6,7" for fields in lines), lines

    rows = slurm_sandbox.sacct(job_id)
    allocation = next(row for row in rows if row["JobID"] == job_id)
    assert allocation["State"] == "COMPLETED"
    assert "gres/gpu=16" in allocation["AllocTRES"]
    step = next(row for row in rows if row["JobID"] == f"{job_id}.0")
    assert step["State"] == "COMPLETED" and step["ExitCode"] == "0:0"


def test_two_jobs_share_a_node_and_tmp_is_private_per_node(slurm_sandbox):
    work = slurm_sandbox.new_dir("share")
    events = work / "events.txt"
    # Each job holds half of a node's GPUs and writes a marker into its node's /tmp. The first job stays until the
    # second one (whose id it reads from second_job) has started: both complete only if they shared the node.
    script = f"""#!/bin/bash
#SBATCH --nodes=1 --gres=gpu:4 --cpus-per-task=1 --mem=200 --time=3
#SBATCH --output={work}/slurm-%j.out
echo "$SLURM_JOB_ID" > /tmp/marker-$SLURM_JOB_ID
echo "START $SLURM_JOB_ID $(hostname)" >> {events}
if [ "$ROLE" = first ]; then
  for i in $(seq 900); do
    [ -s {work}/second_job ] && grep -q "START $(cat {work}/second_job) " {events} && break
    sleep 0.2
  done
fi
echo "END $SLURM_JOB_ID $(hostname) $(ls /tmp | grep -c '^marker-')" >> {events}
"""
    first = slurm_sandbox.sbatch(script, env={"ROLE": "first"})
    node = wait_for_file_text(events, f"START {first} ", 180).split(f"START {first} ")[1].split()[0]
    second = slurm_sandbox.sbatch(script, f"--nodelist={node}", env={"ROLE": "second"})
    (work / "second_job").write_text(second)
    assert slurm_sandbox.wait(second, 180) == "COMPLETED"
    assert slurm_sandbox.wait(first, 60) == "COMPLETED"
    ends = {fields[1]: fields for fields in (line.split() for line in events.read_text().splitlines())
            if fields[0] == "END"}
    assert ends[first][2] == ends[second][2] == node
    # Both markers are in that node's own /tmp (the first job saw at least its own and the second's) ...
    assert int(ends[first][3]) >= 2, events.read_text()
    # ... and not in the host's /tmp.
    assert not (Path("/tmp") / f"marker-{first}").exists() and not (Path("/tmp") / f"marker-{second}").exists()

    others = [n for n in slurm_sandbox.nodes if n != node]
    other = next((n for n in slurm_sandbox.idle_nodes() if n != node), others[0])
    probe = slurm_sandbox.sbatch(f"""#!/bin/bash
#SBATCH --nodes=1 --nodelist={other} --mem=100 --time=1 --output={work}/other.out
ls /tmp | grep -c -e '^marker-{first}$' -e '^marker-{second}$' || true
""")
    assert slurm_sandbox.wait(probe, 180) == "COMPLETED"
    assert (work / "other.out").read_text().split() == ["0"], f"markers of {node} visible on {other}"


def test_srun_from_inside_a_job_reaches_the_controller_on_every_node(slurm_sandbox):
    work = slurm_sandbox.new_dir("inner")
    script = f"""#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --mem=200 --time=2 --output={work}/slurm-%j.out
srun --ntasks=2 bash -c 'scontrol show job $SLURM_JOB_ID | grep -o "JobState=[A-Z]*"; which srun'
"""
    job_id = slurm_sandbox.sbatch(script)
    assert slurm_sandbox.wait(job_id, 60) == "COMPLETED"
    out = (work / f"slurm-{job_id}.out").read_text()
    assert out.count("JobState=RUNNING") == 2, out
    assert out.count("/usr/bin/srun") == 2, out


@pytest.mark.slow
@pytest.mark.slurm_semantics
def test_preempted_low_job_gets_signal_and_is_requeued(slurm_sandbox):
    """A `high` job takes the node of a `low` job: the low batch shell gets USR1, then Slurm requeues it."""
    work = slurm_sandbox.new_dir("preempt")
    log = work / "low.log"
    low, high, node = slurm_sandbox.partition("low"), slurm_sandbox.partition("high"), slurm_sandbox.nodes[-1]
    low_script = f"""#!/bin/bash
#SBATCH --partition={low} --nodes=1 --nodelist={node} --gres=gpu:8 --mem=200 --time=5 --requeue
#SBATCH --signal=B:USR1@30 --open-mode=append --output={work}/low-%j.out
trap 'echo "USR1 restart=${{SLURM_RESTART_COUNT:-0}}" >> {log}' USR1
echo "START restart=${{SLURM_RESTART_COUNT:-0}}" >> {log}
if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ]; then exit 0; fi
for i in $(seq 600); do sleep 0.2; done
"""
    low = slurm_sandbox.sbatch(low_script)
    wait_for_file_text(log, "START restart=0", 60)
    high = slurm_sandbox.sbatch(f"""#!/bin/bash
#SBATCH --partition={high} --nodes=1 --nodelist={node} --gres=gpu:8 --mem=200 --time=2 --output={work}/high-%j.out
sleep 1
""")
    wait_for_file_text(log, "USR1 restart=0", 30)
    assert slurm_sandbox.wait(high, 90) == "COMPLETED"
    wait_for_file_text(log, "START restart=1", 120)
    assert slurm_sandbox.wait(low, 60) == "COMPLETED"
    # Slurm 24.11.5 requeues the preempted job once more when its second run ends (slurmctld.log: "_job_complete:
    # requeue JobId=N per user/system request"; sacct shows that run PREEMPTED): a third run starts, as measured
    # twice here. 22.05 runs it twice.
    restarts = {"22.05": "1", "24.11": "2"}[slurm_sandbox.slurm_version]
    assert slurm_sandbox.scontrol_job(low).get("Restarts") == restarts
    assert log.read_text().count("START restart=0") == 1, log.read_text()


def test_job_runs_the_checkouts_venv_on_a_node(slurm_sandbox):
    """Jobs use <checkout>/.venv through the shared filesystem, like the product's batch scripts do."""
    work = slurm_sandbox.new_dir("venv")
    node = slurm_sandbox.nodes[2]
    job_id = slurm_sandbox.sbatch(f"""#!/bin/bash
#SBATCH --nodes=1 --nodelist={node} --mem=300 --time=2 --output={work}/slurm-%j.out
{sys.executable} -c 'import beam_slurm, socket, sys; print("VENV", socket.gethostname(), sys.prefix)'
""")
    assert slurm_sandbox.wait(job_id, 180) == "COMPLETED", (work / f"slurm-{job_id}.out").read_text()
    fields = (work / f"slurm-{job_id}.out").read_text().split()
    assert fields[:2] == ["VENV", node] and fields[2] == sys.prefix


@pytest.mark.slow
@pytest.mark.slurm_semantics
def test_time_limit_signal_reaches_batch_shell_which_requeues_itself(slurm_sandbox):
    """--signal=B:USR1@N before the time limit; the trap requeues the job, which restarts with RESTART_COUNT=1."""
    work = slurm_sandbox.new_dir("signal")
    log = work / "run.log"
    job_id = slurm_sandbox.sbatch(f"""#!/bin/bash
#SBATCH --nodes=1 --mem=100 --time=1 --signal=B:USR1@45 --requeue --open-mode=append
#SBATCH --output={work}/slurm-%j.out
restart=${{SLURM_RESTART_COUNT:-0}}
trap 'echo "USR1 restart=$restart" >> {log}; scontrol requeue $SLURM_JOB_ID; exit 0' USR1
echo "START restart=$restart host=$(hostname)" >> {log}
if [ "$restart" -ge 1 ]; then exit 0; fi
for i in $(seq 600); do sleep 0.2; done
""")
    wait_for_file_text(log, "USR1 restart=0", 90)
    wait_for_file_text(log, "START restart=1", 120)
    assert slurm_sandbox.wait(job_id, 60) == "COMPLETED"
    assert slurm_sandbox.scontrol_job(job_id).get("Restarts") == "1"


def test_a_lane_job_without_a_partition_goes_to_its_lane_and_a_named_partition_wins(slurm_sandbox):
    """The runner's lanes: BEAM_SANDBOX_LANE makes the lane's batch partition the default of sbatch (the sandbox's
    cli_filter), so scenarios side by side never share nodes; a partition the job names itself (header,
    SBATCH_PARTITION, command line) still wins, as it would without a lane."""
    if slurm_sandbox.lane is None:
        pytest.skip("runs in a lane (tools/run_tests.sh): this session uses the whole sandbox")
    work = slurm_sandbox.new_dir("lane")
    plain = slurm_sandbox.sbatch("#!/bin/bash\ntrue\n", "--time=1", "--mem=100", f"--output={work}/%j.out")
    header = slurm_sandbox.sbatch(f"#!/bin/bash\n#SBATCH --partition={slurm_sandbox.partition('low')}\ntrue\n",
                                  "--time=1", "--mem=100", f"--output={work}/%j.out")
    from_env = slurm_sandbox.sbatch("#!/bin/bash\ntrue\n", "--time=1", "--mem=100", f"--output={work}/%j.out",
                                    env={"SBATCH_PARTITION": slurm_sandbox.partition("high")})
    for job, kind in ((plain, "batch"), (header, "low"), (from_env, "high")):
        assert slurm_sandbox.wait(job, 60) == "COMPLETED"
        # The controller's record (sacct's may still lack the start record of so short a job).
        record = slurm_sandbox.scontrol_job(job)
        assert record["Partition"] == slurm_sandbox.partition(kind), record
        assert record["NodeList"] in slurm_sandbox.nodes, record
