"""The fabric check's plan, interface checks and verdict (pure), one real gloo run of three ranks on this machine, and
its keys in the recipe. The check across sandbox nodes: tests/sandbox/test_fabric_check.py."""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from beam_slurm.jobs.ray_cluster import fabric
from beam_slurm.jobs.ray_cluster.fabric import FabricSettings, ring_rounds, spec_matches, verdict

REPO = Path(__file__).resolve().parents[3]
REQUIRED = ["recipe=lora_16gpu", "trainer.backend=rehearsal", "paths.model_path=/m", "paths.data_dir=/d"]


def test_interface_specs_follow_nccl_rules():
    names = ["lo", "eth0", "ib0", "ib1"]
    assert spec_matches("ib", names) and spec_matches("=ib0", names) and spec_matches("eth,ib", names)
    assert not spec_matches("=ib", names) and not spec_matches("enp", names)
    assert spec_matches("^docker,lo", names) and not spec_matches("^eth,ib,lo", names)


@pytest.mark.parametrize("hosts,gpus", [(2, 1), (3, 1), (4, 1), (5, 1), (3, 2), (4, 8), (1, 2)])
def test_every_ring_pair_is_measured_once_and_no_rank_is_in_two_pairs_of_a_round(hosts, gpus):
    ranks = {h * gpus + g: (f"n{h}", g) for h in range(hosts) for g in range(gpus)}
    rounds = ring_rounds({r: v[0] for r, v in ranks.items()}, {r: v[1] for r, v in ranks.items()})
    assert len(rounds) <= 3
    pairs = [p for r in rounds for p in r]
    for one_round in rounds:
        members = [x for pair in one_round for x in pair]
        assert len(members) == len(set(members))
    if hosts == 1:  # one machine: the ranks pair with each other (the standalone GPU check)
        assert len(pairs) == (1 if gpus == 2 else gpus)
        return
    for a, b in pairs:
        assert ranks[a][0] != ranks[b][0] and ranks[a][1] == ranks[b][1], "pairs cross hosts on one rail"
    for rank in ranks:  # each rank meets its ring neighbours: two of them, one when there are two hosts
        assert sum(rank in p for p in pairs) == (1 if hosts == 2 else 2)


def rank_record(rank: int, host: str, pairs: list[dict], local: int = 0, **extra) -> dict:
    return {"rank": rank, "local_rank": local, "host": host, "pairs": pairs, "errors": [], "backend": "gloo",
            "address": None, **extra}


def ok(peer: int, host: str, gbps: float) -> dict:
    return {"peer": peer, "peer_host": host, "gbytes_per_s": gbps, "seconds": 0.1}


def failed(peer: int, host: str) -> dict:
    return {"peer": peer, "peer_host": host, "error": "no answer within 5s"}


def nodes(*ranks: dict, problems: dict | None = None) -> list[dict]:
    return [{"host": r["host"], "problems": (problems or {}).get(r["host"], []), "ranks": [r]} for r in ranks]


SETTINGS = FabricSettings(enabled=True, timeout_s=5)


def test_the_node_that_answers_nobody_is_named_not_its_neighbours():
    records = nodes(rank_record(0, "n1", [failed(1, "n2"), ok(2, "n3", 2.0)]),
                    rank_record(1, "n2", [failed(0, "n1"), failed(2, "n3")]),
                    rank_record(2, "n3", [failed(1, "n2"), ok(0, "n1", 2.0)]))
    failing, summary = verdict(records, SETTINGS)
    assert list(failing) == ["n2"] and "no answer over the fabric from n1, n3 within 5s" in failing["n2"][0]
    assert summary["bad_nodes"] == ["n2"]


def test_a_slow_node_is_named_with_its_bandwidth_and_the_median():
    records = nodes(rank_record(0, "n1", [ok(1, "n2", 10.0), ok(3, "n4", 10.0)]),
                    rank_record(1, "n2", [ok(0, "n1", 10.0), ok(2, "n3", 3.0)]),
                    rank_record(2, "n3", [ok(1, "n2", 3.0), ok(3, "n4", 3.0)]),
                    rank_record(3, "n4", [ok(2, "n3", 3.0), ok(0, "n1", 10.0)]))
    failing, summary = verdict(records, SETTINGS)
    assert list(failing) == ["n3"], failing
    assert "fabric bandwidth 3.00 GB/s is below 0.5 x the median 10.00 GB/s" in failing["n3"][0]
    assert summary["node_gbytes_per_s"]["n3"] == 3.0


def test_two_nodes_name_the_one_whose_link_is_down_else_both():
    pair = [rank_record(0, "n1", [failed(1, "n2")]), rank_record(1, "n2", [failed(0, "n1")])]
    failing, _ = verdict(nodes(*pair, problems={"n2": ["fabric interface fab0 is down"]}), SETTINGS)
    assert list(failing) == ["n2"]
    failing, _ = verdict(nodes(*pair), SETTINGS)
    assert sorted(failing) == ["n1", "n2"] and "cannot tell which node" in failing["n1"][0]


def test_a_configured_interface_that_does_not_exist_is_named_with_its_setting():
    names = fabric.interface_names()
    settings = FabricSettings(interface=names[0], interface_settings={"ray.network_interface": "ibx9",
                                                                      "ray.extra_env.NCCL_SOCKET_IFNAME": names[0]})
    problems = fabric.interface_problems(settings, {"GLOO_SOCKET_IFNAME": "=nope0"})
    assert any(p.startswith("ray.network_interface='ibx9' matches no network interface") and
               p.endswith("fix ray.network_interface") for p in problems), problems
    assert any(p.startswith("GLOO_SOCKET_IFNAME (from the environment)='=nope0'") for p in problems), problems
    assert not any("NCCL_SOCKET_IFNAME" in p for p in problems)


def test_the_recipe_keys_resolve_the_interface_and_what_to_check():
    from beam_slurm.config.load import load_config

    cfg = load_config([*REQUIRED, "+trainer.extra_env.NCCL_SOCKET_IFNAME='=ib0'", "ray.network_interface=eth0",
                       "cluster.fabric_check_timeout_s=7"])
    settings = fabric.fabric_settings(cfg)
    assert settings.enabled and settings.timeout_s == 7 and settings.bytes == 64 * 1024**2
    assert settings.interface == "ib0", "NCCL's interface is what the check must measure"
    assert settings.interface_settings == {"ray.network_interface": "eth0", "trainer.extra_env.NCCL_SOCKET_IFNAME": "=ib0"}
    port = fabric.with_job_port(dataclasses.asdict(settings), cfg.ray, "1234")["port"]
    assert cfg.ray.port_range_start <= port < cfg.ray.port_range_end


def test_a_bad_timeout_is_refused_by_name():
    from beam_slurm.config.load import load_config
    from beam_slurm.core.errors import ConfigError

    with pytest.raises(ConfigError, match="cluster.fabric_check_timeout_s"):
        load_config([*REQUIRED, "cluster.fabric_check_timeout_s=0"])


def test_three_ranks_over_loopback_measure_every_pair_and_the_all_reduce():
    """Real torch.distributed (gloo) in three processes, torchrun-style environment; rank 0 prints the verdict."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for rank in range(3):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "WORLD_SIZE": "3", "LOCAL_RANK": str(rank)}
        procs.append(subprocess.Popen([sys.executable, "-m", "beam_slurm.jobs.ray_cluster.fabric", "--backend", "gloo",
                                       "--bytes", "1000000", "--timeout", "20", "--interface", "lo"], env=env,
                                      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    records = [json.loads(out.split(fabric.RESULT_PREFIX, 1)[1].splitlines()[0]) for out, _ in outs]
    assert all(len(r["pairs"]) == 2 and all("gbytes_per_s" in p for p in r["pairs"]) for r in records), records
    assert records[0]["all_reduce"]["bytes"] == 1000000 and records[0]["address"] == "127.0.0.1"
    assert "fabric check: 3 ranks, gloo over lo" in outs[0][0] and outs[0][0].count("fabric pair") == 3
