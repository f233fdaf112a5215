"""The sandbox at 8 and 16 nodes, rendered without starting it (CI's sandbox stays at 4 nodes): node names,
addresses, interface and namespace names, slurm.conf, gres.conf and /etc/hosts for every node."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from test_sandbox_tool import load_tool


@pytest.mark.parametrize("count", [8, 16])
def test_nodes_render_for_every_node(count):
    tool = load_tool()
    nodes = tool.make_nodes(count)
    layout = tool.Layout(Path("/var/tmp/sandbox-render-only"))
    assert [n.name for n in nodes] == [f"n{i}" for i in range(1, count + 1)]
    ips = [ipaddress.ip_address(n.ip) for n in nodes]
    fabric = [ipaddress.ip_address(n.fabric_ip) for n in nodes]
    assert len(set(ips)) == count and all(ip in tool.SUBNET for ip in ips)
    assert len(set(fabric)) == count and all(ip in tool.FABRIC_SUBNET for ip in fabric)
    assert str(ips[-1]) == f"10.77.0.{10 + count}" and tool.CONTROLLER_IP not in map(str, ips)
    names = [n.netns for n in nodes] + [n.veth for n in nodes] + [n.fabric_veth for n in nodes]
    assert len(set(names)) == 3 * count
    assert all(len(n.veth) <= 15 and len(n.fabric_veth) <= 15 for n in nodes)  # Linux IFNAMSIZ

    conf = tool.slurm_conf_text(layout, nodes)
    assert conf.count("NodeName=") == count and f"Nodes=n[1-{count}]" in conf
    assert all(f"NodeName={n.name} NodeAddr={n.ip} " in conf for n in nodes)
    gres = tool.gres_conf_text(layout, nodes)
    assert all(f"NodeName={n.name} Name=gpu File={layout.node_gpu_dir(n)}/gpu[0-7]" in gres for n in nodes)
    hosts = tool.hosts_text(nodes)
    assert all(f"{n.ip} {n.name}" in hosts.splitlines() for n in nodes)
    assert count * tool.GPUS_PER_NODE in (64, 128)


def test_node_count_limits_are_named():
    tool = load_tool()
    for bad in (0, 65):
        with pytest.raises(tool.SandboxError, match="choose between 1 and 64 nodes"):
            tool.make_nodes(bad)


def test_lanes_are_disjoint_groups_of_four_nodes_with_partitions_of_their_own():
    tool = load_tool()
    layout = tool.Layout(Path("/var/tmp/sandbox-render-only"))
    conf = tool.slurm_conf_text(layout, tool.make_nodes(12))
    for k, nodes in ((1, "n[1-4]"), (2, "n[5-8]"), (3, "n[9-12]")):
        for kind in ("batch", "low", "high"):
            line = next(line for line in conf.splitlines() if line.startswith(f"PartitionName=lane{k}-{kind} "))
            assert f" Nodes={nodes} " in line and "Default=YES" not in line, line
    low = next(line for line in conf.splitlines() if line.startswith("PartitionName=lane2-low "))
    assert "PreemptMode=REQUEUE GraceTime=20" in low, "a lane's low partition is preempted as the cluster's is"
    assert [line for line in conf.splitlines() if "Default=YES" in line] == [
        "PartitionName=batch Nodes=n[1-12] Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF"]
    assert "CliFilterPlugins=cli_filter/lua" in conf and tool.LANE_ENV in tool.CLI_FILTER_LUA
    assert tool.lanes(tool.make_nodes(4)) == [] and len(tool.lanes(tool.make_nodes(13))) == 3
    assert "PartitionName=lane" not in tool.slurm_conf_text(layout, tool.make_nodes(4))
