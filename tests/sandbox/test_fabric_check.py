"""The fabric check in the training job's preflight, on two sandbox nodes over their second network (fab0): it passes
and logs time, bandwidth and interface; with one node's fabric link cut it fails naming that node, before Ray starts.
The driver is a one-line stand-in (the check runs before any trainer)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def sandbox_tool():
    spec = importlib.util.spec_from_file_location("slurm_sandbox_tool", REPO / "tools" / "slurm_sandbox.py")
    if "slurm_sandbox_tool" not in sys.modules:
        module = importlib.util.module_from_spec(spec)
        sys.modules["slurm_sandbox_tool"] = module
        spec.loader.exec_module(module)
    return sys.modules["slurm_sandbox_tool"]


def two_nodes(slurm_sandbox) -> list[str]:
    idle = slurm_sandbox.idle_nodes()
    return idle[-2:] if len(idle) >= 2 else slurm_sandbox.nodes[-2:]


def fabric_job(slurm_sandbox, work: Path, hosts: list[str]) -> str:
    keys = (f"recipe=lora_16gpu trainer.backend=rehearsal paths.model_path={work} paths.data_dir={work} "
            f"paths.log_dir={work}/logs paths.export_path={work}/export cluster.fabric_interface=fab0 cluster.fabric_check_timeout_s=5 "
            "cluster.max_requeues=0")
    return slurm_sandbox.sbatch(f"""#!/bin/bash
#SBATCH --nodes=2 --nodelist={','.join(hosts)} --ntasks-per-node=1 --gpus-per-node=8 --exclusive --time=5
#SBATCH --output={work}/slurm-%j.out
export CKPT_PATH={work}/ckpt BEAM_SLURM_STATE_DIR={work}/state
exec {PYTHON} -m beam_slurm.jobs.training.train_job {keys} -- {PYTHON} -c "print('DRIVER ran')"
""")


def attempt_log(work: Path, job: str) -> tuple[str, dict]:
    out = (work / f"slurm-{job}.out").read_text()
    records = sorted((work / "logs").glob(f"{job}-*/fabric.json"))  # the first attempt's
    return out, json.loads(records[0].read_text()) if records else {}


def test_fabric_check_passes_on_two_nodes_and_logs_time_bandwidth_and_interface(slurm_sandbox):
    work = slurm_sandbox.new_dir("fabric-ok")
    hosts = two_nodes(slurm_sandbox)
    job = fabric_job(slurm_sandbox, work, hosts)
    state = slurm_sandbox.wait(job, timeout=300)
    out, record = attempt_log(work, job)
    assert state == "COMPLETED", out
    assert "fabric check: 2 ranks, gloo over fab0 (" in out and "DRIVER ran" in out, out
    pair = record["pairs"][0]
    assert sorted(pair["hosts"]) == sorted(hosts) and pair["gbytes_per_s"] > 0, record
    assert record["all_reduce"]["bytes"] == 64 * 1024**2 and record["bad_nodes"] == []
    tool = sandbox_tool()
    fabric_ips = {n.name: n.fabric_ip for n in tool.make_nodes(int(slurm_sandbox.nodes[-1][1:]))}
    assert record["addresses"] == {h: fabric_ips[h] for h in hosts}, "the traffic went over the fabric"
    print(f"fabric check on the sandbox: {record['seconds']:.1f}s per rank, {pair['gbytes_per_s']:.2f} GB/s")


def test_fabric_check_names_the_node_whose_fabric_link_is_down_and_ray_never_starts(slurm_sandbox):
    work = slurm_sandbox.new_dir("fabric-cut")
    hosts = two_nodes(slurm_sandbox)
    tool = sandbox_tool()
    victim = next(n for n in tool.make_nodes(int(slurm_sandbox.nodes[-1][1:])) if n.name == hosts[1])
    subprocess.run(["ip", "link", "set", victim.fabric_veth, "down"], check=True)
    try:
        job = fabric_job(slurm_sandbox, work, hosts)
        state = slurm_sandbox.wait(job, timeout=300)
    finally:
        subprocess.run(["ip", "link", "set", victim.fabric_veth, "up"], check=True)
    out, record = attempt_log(work, job)
    assert state == "FAILED", out
    assert f"preflight FAILED on {victim.name}: fabric interface fab0 is down" in out, out
    assert f"preflight FAILED on {hosts[0]}" not in out, "the healthy node is not blamed"
    assert record["bad_nodes"] == [victim.name] and "error" in record["pairs"][0], record
    assert "starting the Ray step" not in out
