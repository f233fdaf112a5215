"""Fabric check: before Ray starts, move data between the allocation's nodes over the network NCCL will use, so a
wrong interface, a dead link or a slow node fails the preflight by name, not an hour later after the model loaded
(what it measures and names: docs, guides/operations.md, "Fabric check").

Every node joins a rendezvous (a TCPStore on the head's Slurm address, not the fabric, so a broken link does not hide
who answered); ranks then exchange `bytes` with their ring neighbours and one all_reduce times the collective. The
preflight calls `run_node` on every node, the batch shell `report`; standalone (torchrun-style) rank 0 prints it.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import importlib.util
import json
import logging
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beam_slurm.config.ports import FIXED_PORTS, first_block
from beam_slurm.config.ray import RaySettings
from beam_slurm.jobs.ray_cluster.gpus import allocated_gpus
from beam_slurm.jobs.ray_cluster.network import interface_ipv4 as address_of
from beam_slurm.slurm.scheduler import expand_hostnames

logger = logging.getLogger(__spec__.name)  # its package name under `python -m` too (__name__ is "__main__")

if TYPE_CHECKING:  # every node's preflight imports this module: the schema (and Hydra) only for the type
    from beam_slurm.config.schema import BeamConfig

# torch is imported inside run_rank, on purpose: only the probe's worker processes need it.

RESULT_PREFIX = "BEAM_FABRIC "  # starts the JSON line each rank prints
INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
_ITERATIONS = 3
_START_UP_S = 60.0  # extra rendezvous wait while the other nodes' processes start (srun skew, imports)
_SIOCGIFFLAGS = 0x8913
_IFF_UP, _IFF_RUNNING = 0x1, 0x40


@dataclass
class FabricSettings:
    """What the fabric check does; built by the job from the `cluster.fabric_*` keys."""

    enabled: bool = False  # cluster.fabric_check
    timeout_s: float = 30.0  # to join, and for each pair to answer (cluster.fabric_check_timeout_s)
    bytes: int = 64 * 1024**2  # each way per pair and iteration (cluster.fabric_check_bytes)
    interface: str = ""  # the check's GLOO/NCCL_SOCKET_IFNAME; empty: the hostname's network
    interface_settings: dict[str, str] = field(default_factory=dict)  # setting -> interface spec to check per node
    backend: str = "auto"  # gloo, nccl, or auto (NCCL where the node has GPUs and a driver)
    port: int = 0  # rendezvous port on the first node (the spare port of the job's Ray port block)
    min_bandwidth_ratio: float = 0.5


def fabric_settings(cfg: BeamConfig) -> FabricSettings:
    """The recipe's `cluster.fabric_*` keys and every configured interface name; the job fills in the port."""
    cluster, ray, trainer = cfg.cluster, cfg.ray, cfg.trainer
    named = {
        key: value
        for key, value in (
            ("cluster.fabric_interface", cluster.fabric_interface),
            ("ray.network_interface", ray.network_interface),
        )
        if value
    }
    for section, extra in (("ray.extra_env", ray.extra_env), ("trainer.extra_env", trainer.extra_env)):
        for variable in INTERFACE_VARIABLES:
            if extra.get(variable):
                named[f"{section}.{variable}"] = extra[variable]
    plain_nccl = next(
        (
            v.lstrip("=")
            for k, v in named.items()
            if k.endswith("NCCL_SOCKET_IFNAME") and not v.startswith("^") and "," not in v
        ),
        "",
    )
    interface = cluster.fabric_interface or plain_nccl or ray.network_interface
    return FabricSettings(
        enabled=bool(cluster.fabric_check),
        timeout_s=float(cluster.fabric_check_timeout_s),
        bytes=int(cluster.fabric_check_bytes),
        interface=interface,
        interface_settings=named,
    )


def with_job_port(settings: dict[str, Any], ray_settings: RaySettings, job_id: str) -> dict[str, Any]:
    """The last spare fixed port of the job's Ray port block: Ray is not up yet, and the site opened that range."""
    if settings.get("port"):
        return settings
    block = first_block(int(job_id), ray_settings)
    base = ray_settings.port_range_start + block * ray_settings.ports_per_job
    return {**settings, "port": base + FIXED_PORTS - 1}


def interface_names() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


def interface_ipv4(name: str) -> str | None:
    try:
        return address_of(name)
    except OSError:
        return None


def interface_running(name: str) -> bool:
    """Up and with a carrier (IFF_UP and IFF_RUNNING)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFFLAGS, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return False
    flags = struct.unpack("H", packed[16:18])[0]
    return bool(flags & _IFF_UP and flags & _IFF_RUNNING)


def spec_matches(spec: str, names: list[str]) -> bool:
    """Whether an NCCL-style interface spec selects at least one of `names`: a comma list of prefixes, `=` before
    the list for exact names, `^` to exclude (an exclusion list is satisfied by any interface it leaves)."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    wanted = [item for item in spec.lstrip("=").split(",") if item]
    selected = [n for n in names if any(n == w if exact else n.startswith(w) for w in wanted)]
    return any(n not in selected and n != "lo" for n in names) if exclude else bool(selected)


def interface_problems(settings: FabricSettings, environ: Mapping[str, str]) -> list[str]:
    """Configured interface names that select nothing on this node, and a fabric interface that is not usable."""
    names = interface_names()
    here = f"{socket.gethostname()} has {', '.join(names)}"
    specs = dict(settings.interface_settings)
    for variable in INTERFACE_VARIABLES:
        if environ.get(variable) and variable not in specs:
            specs[f"{variable} (from the environment)"] = environ[variable]
    problems = [
        f"{setting}={spec!r} matches no network interface ({here}); fix {setting.split(' ')[0]}"
        for setting, spec in sorted(specs.items())
        if spec and not spec_matches(spec, names)
    ]
    iface = settings.interface
    if iface and iface in names:
        if not interface_running(iface):
            problems.append(f"fabric interface {iface} is down (no carrier or administratively down)")
        elif not interface_ipv4(iface):
            problems.append(f"fabric interface {iface} has no IPv4 address")
    elif iface and not any(p.startswith(("cluster.fabric_interface", "ray.network_interface")) for p in problems):
        problems.append(f"fabric interface {iface!r} does not exist ({here}); fix cluster.fabric_interface")
    return problems


def ring_rounds(hosts_by_rank: Mapping[int, str], local_by_rank: Mapping[int, int]) -> list[list[tuple[int, int]]]:
    """Rounds of rank pairs: a ring over the hosts per local rank (over all ranks on one host)."""
    host_order = list(dict.fromkeys(hosts_by_rank[r] for r in sorted(hosts_by_rank)))
    rings = (
        [sorted(hosts_by_rank)]
        if len(host_order) == 1
        else [
            [
                r
                for h in host_order
                for r in sorted(hosts_by_rank)
                if hosts_by_rank[r] == h and local_by_rank[r] == local
            ]
            for local in sorted(set(local_by_rank.values()))
        ]
    )
    rounds: list[list[tuple[int, int]]] = [[], [], []]
    for ring in rings:
        n = len(ring)
        if n < 2:
            continue
        edges = [(ring[i], ring[(i + 1) % n]) for i in range(n if n > 2 else 1)]
        for i, edge in enumerate(edges):
            rounds[2 if (n % 2 and i == n - 1 and n > 2) else i % 2].append(edge)
    return [r for r in rounds if r]


def _barrier(store: Any, key: str, count: int, deadline: float) -> None:
    store.add(key, 1)
    while int(store.add(key, 0)) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _group(dist: Any, backend: str, store: Any, rank: int, size: int, timeout_s: float, interface: str) -> Any:
    """A process group of its own (not the default group), so a pair that hangs does not block the next one."""
    timeout = timedelta(seconds=timeout_s)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, options)
    options = dist.ProcessGroupGloo._Options()
    options._timeout = timeout
    interface = interface or os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    options._devices = [
        dist.ProcessGroupGloo.create_device(interface=interface)
        if interface
        else dist.ProcessGroupGloo.create_default_device()
    ]
    return dist.ProcessGroupGloo(store, rank, size, options)


def _finish(torch: Any, work: Any, device: Any, timeout_s: float) -> None:
    work.wait(timedelta(seconds=timeout_s))
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _pair_exchange(
    dist: Any,
    torch: Any,
    store: Any,
    me: int,
    peer: int,
    backend: str,
    nbytes: int,
    timeout_s: float,
    device: Any,
    interface: str,
) -> dict[str, Any]:
    """Ping-pong `nbytes` with `peer` in a 2-rank group of its own; seconds and GB/s (both directions counted)."""
    pair_rank = 0 if me < peer else 1
    other = 1 - pair_rank
    group = _group(dist, backend, store, pair_rank, 2, timeout_s, interface)
    payload = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
    warm = torch.ones(1024, dtype=torch.float32, device=device)

    def ping_pong(tensor: Any) -> None:
        first, second = (group.send, group.recv) if pair_rank == 0 else (group.recv, group.send)
        _finish(torch, first([tensor], other, 0), device, timeout_s)
        _finish(torch, second([tensor], other, 0), device, timeout_s)

    ping_pong(warm)
    started = time.perf_counter()
    for _ in range(_ITERATIONS):
        ping_pong(payload)
    seconds = time.perf_counter() - started
    moved = 2 * _ITERATIONS * payload.numel() * 4
    return {"seconds": round(seconds, 4), "bytes": moved, "gbytes_per_s": round(moved / seconds / 1e9, 3)}


def _world_all_reduce(
    dist: Any,
    torch: Any,
    store: Any,
    rank: int,
    world: int,
    backend: str,
    nbytes: int,
    timeout_s: float,
    device: Any,
    interface: str,
) -> dict[str, Any]:
    group = _group(dist, backend, store, rank, world, timeout_s, interface)
    tensor = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
    _finish(torch, group.allreduce([tensor[:1024]]), device, timeout_s)
    started = time.perf_counter()
    _finish(torch, group.allreduce([tensor]), device, timeout_s)
    seconds = time.perf_counter() - started
    size = tensor.numel() * 4
    # Bus bandwidth as nccl-tests reports it for all_reduce: algbw x 2(n-1)/n.
    return {
        "seconds": round(seconds, 4),
        "bytes": size,
        "bus_gbytes_per_s": round(size / seconds / 1e9 * 2 * (world - 1) / world, 3),
    }


def _bounded(seconds: float, call: Any, *args: Any) -> dict[str, Any]:
    """call(*args) in a thread, {"error": ...} on an exception or timeout (the thread is left to os._exit)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome.update(call(*args))
        except Exception as exc:  # the verdict names the node; the message says what broke
            text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            outcome["error"] = f"{type(exc).__name__}: {text}"

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    return {"error": f"no answer within {seconds:.0f}s"} if thread.is_alive() else outcome


def run_rank(
    settings: FabricSettings, environ: Mapping[str, str], host: str | None = None, run_id: str = "0"
) -> dict[str, Any]:
    """This rank's record (torchrun-style environment); rank 0 also gathers every rank's; `run_id` prefixes the keys."""
    rank, world = int(environ["RANK"]), int(environ["WORLD_SIZE"])
    local = int(environ.get("LOCAL_RANK", "0"))
    host = host or socket.gethostname()
    record: dict[str, Any] = {
        "rank": rank,
        "local_rank": local,
        "host": host,
        "interface": settings.interface,
        "address": interface_ipv4(settings.interface) if settings.interface else None,
        "pairs": [],
        "errors": [],
    }
    started = time.monotonic()
    phases: dict[str, float] = record.setdefault("phases", {})
    import torch
    import torch.distributed as dist

    phases["import"] = round(time.monotonic() - started, 2)

    backend = settings.backend if settings.backend != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
    record["backend"] = backend
    if backend == "nccl":
        if not torch.cuda.is_available():
            record["errors"].append("backend nccl but torch sees no GPU here")
            return record
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if settings.interface:
        os.environ.setdefault("NCCL_SOCKET_IFNAME", settings.interface)
    record["socket_ifname"] = {v: os.environ.get(v, "") for v in INTERFACE_VARIABLES}
    # The rendezvous runs over the Slurm network: a broken fabric must not hide who answered. Connecting waits for
    # the slowest node's start-up (torch's import) on top of the timeout.
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store: dist.Store = dist.TCPStore(
        environ["MASTER_ADDR"],
        int(environ["MASTER_PORT"]),
        None,
        rank == 0 and not agent_store,
        timedelta(seconds=settings.timeout_s + _START_UP_S),
        wait_for_workers=False,
    )
    store = dist.PrefixStore(f"beam-fabric-{run_id}", store)
    store.set(f"join/{rank}", json.dumps({"host": host, "local": local}))
    if rank == 0:
        join_deadline = time.monotonic() + settings.timeout_s
        keys = [f"join/{r}" for r in range(world)]
        while not store.check(keys) and time.monotonic() < join_deadline:
            time.sleep(0.05)
        joined = {r: json.loads(store.get(f"join/{r}")) for r in range(world) if store.check([f"join/{r}"])}
        store.set("plan", json.dumps({str(r): v for r, v in joined.items()}))
    store.wait(["plan"], timedelta(seconds=settings.timeout_s * 2))
    plan = {int(r): v for r, v in json.loads(store.get("plan")).items()}
    phases["join"] = round(time.monotonic() - started, 2)
    record["joined"] = len(plan)
    if rank not in plan:
        record["errors"].append(f"joined after the {settings.timeout_s:.0f}s deadline")
        return record
    rounds = ring_rounds({r: v["host"] for r, v in plan.items()}, {r: v["local"] for r, v in plan.items()})
    for index, pairs in enumerate(rounds):
        deadline = time.monotonic() + settings.timeout_s + 5
        for a, b in pairs:
            if rank not in (a, b):
                continue
            peer = b if rank == a else a
            entry: dict[str, Any] = {"peer": peer, "peer_host": plan[peer]["host"], "round": index}
            entry.update(
                _bounded(
                    settings.timeout_s,
                    _pair_exchange,
                    dist,
                    torch,
                    dist.PrefixStore(f"pair-{index}-{a}-{b}", store),
                    rank,
                    peer,
                    backend,
                    settings.bytes,
                    settings.timeout_s,
                    device,
                    settings.interface,
                )
            )
            record["pairs"].append(entry)
        _barrier(store, f"round-{index}", len(plan), deadline)
    phases["pairs"] = round(time.monotonic() - started, 2)
    if not any("error" in p for p in record["pairs"]):
        store.set(f"pairs-ok/{rank}", "1")
    if len(plan) == world and world > 1:
        _barrier(store, "pairs-done", world, time.monotonic() + settings.timeout_s)
        if store.check([f"pairs-ok/{r}" for r in range(world)]):
            outcome = _bounded(
                settings.timeout_s,
                _world_all_reduce,
                dist,
                torch,
                dist.PrefixStore("world", store),
                rank,
                world,
                backend,
                settings.bytes,
                settings.timeout_s,
                device,
                settings.interface,
            )
            if "error" in outcome:
                record["errors"].append(f"all_reduce over {world} ranks failed: {outcome['error']}")
            else:
                record["all_reduce"] = outcome
    record["seconds"] = phases["all_reduce"] = round(time.monotonic() - started, 2)
    store.set(f"result/{rank}", json.dumps(record))
    if rank == 0:
        deadline = time.monotonic() + settings.timeout_s
        keys = [f"result/{r}" for r in sorted(plan)]
        while not store.check(keys) and time.monotonic() < deadline:
            time.sleep(0.05)
        record["gathered"] = [json.loads(store.get(k)) for k in keys if store.check([k])]
        # Rank 0 hosts the store: it stays until every other rank has made its last call.
        while int(store.add("left", 0)) < len(plan) - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        store.add("left", 1)
    return record


def start_node(settings: FabricSettings, environ: Mapping[str, str] | None = None) -> Callable[[], dict[str, Any]]:
    """In the preflight step: start this node's ranks (processes of their own, which spend their first seconds
    importing torch) and return the function that waits for them: this node's interface problems and its ranks'
    records. The preflight does its own checks between the two."""
    env = dict(os.environ if environ is None else environ)
    host = env.get("SLURMD_NODENAME") or socket.gethostname()
    node_rank = int(env.get("SLURM_PROCID", "0"))
    nodes = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 1)
    result: dict[str, Any] = {"host": host, "problems": interface_problems(settings, env), "ranks": []}
    if nodes < 2:
        result["skipped"] = "one node: no fabric between nodes to measure"
        return lambda: result
    if importlib.util.find_spec("torch") is None:
        result["skipped"] = (
            f"torch is not installed for {sys.executable}, so the fabric was not measured here; "
            "install torch there or set cluster.fabric_check=false"
        )
        return lambda: result
    hosts = expand_hostnames(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or host)
    gpus, _ = allocated_gpus(env)
    backend = settings.backend
    if backend == "auto":  # NCCL where the node has GPUs and a driver
        backend = "nccl" if gpus and shutil.which("nvidia-smi") else "gloo"
    per_node = max(len(gpus), 1) if backend == "nccl" else 1
    worker_settings = json.dumps({**dataclasses.asdict(settings), "backend": backend})
    run_id = "-".join(env.get(k, "0") for k in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_STEP_ID"))
    master_addr = socket.gethostbyname(hosts[0])
    workers = []
    for local in range(per_node):
        worker_env = {
            **env,
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(settings.port),
            "RANK": str(node_rank * per_node + local),
            "WORLD_SIZE": str(nodes * per_node),
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(per_node),
        }
        worker_env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        workers.append(
            subprocess.Popen(
                [sys.executable, "-m", __name__, "--settings", worker_settings, "--host", host, "--run", run_id],
                env=worker_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    # Join, up to three rounds, the all_reduce and the gather each end within the timeout; the rest is start-up.
    limit = settings.timeout_s * 7 + 120
    started = time.monotonic()

    def collect() -> dict[str, Any]:
        for local, worker in enumerate(workers):
            try:
                out, err = worker.communicate(timeout=max(limit - (time.monotonic() - started), 1.0))
            except subprocess.TimeoutExpired:
                worker.kill()
                out, err = worker.communicate()
                result["problems"].append(f"fabric check rank of local GPU {local} did not finish within {limit:.0f}s")
            records = [
                json.loads(line[len(RESULT_PREFIX) :]) for line in out.splitlines() if line.startswith(RESULT_PREFIX)
            ]
            if records:  # a rank prints its record without what rank 0 gathered
                result["ranks"].append(records[0])
            elif not any("did not finish" in p for p in result["problems"]):
                tail = " | ".join(err.strip().splitlines()[-3:])[:400]
                result["problems"].append(f"fabric check process (local rank {local}) crashed: {tail}")
        return result

    return collect


def run_node(settings: FabricSettings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """In the preflight step: this node's interface problems and the records of its ranks (processes of their own)."""
    return start_node(settings, environ)()


def verdict(
    node_records: list[dict[str, Any]], settings: FabricSettings
) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """Problems by host (only failing hosts), and a summary for the logs and fabric.json."""
    problems: dict[str, list[str]] = {rec["host"]: list(rec.get("problems", [])) for rec in node_records}
    skipped = {rec["host"]: rec["skipped"] for rec in node_records if rec.get("skipped")}
    ranks = [r for rec in node_records for r in rec.get("ranks", [])]
    host_of = {r["rank"]: r["host"] for r in ranks}
    edges: dict[tuple[int, int], dict[str, Any]] = {}
    for r in ranks:
        problems.setdefault(r["host"], []).extend(f"fabric check: {e}" for e in r.get("errors", []))
        for pair in r.get("pairs", []):
            key = (min(r["rank"], pair["peer"]), max(r["rank"], pair["peer"]))
            seen = edges.setdefault(
                key,
                {"local": r["local_rank"], "hosts": (host_of.get(key[0], "?"), host_of.get(key[1], pair["peer_host"]))},
            )
            if "error" in pair:
                seen.setdefault("error", pair["error"])
            elif r["rank"] == key[0] or "gbytes_per_s" not in seen:
                seen["gbytes_per_s"] = pair["gbytes_per_s"]
                seen["seconds"] = pair["seconds"]
    for edge in edges.values():
        if "error" in edge:
            edge.pop("gbytes_per_s", None)
    wait = f"within {settings.timeout_s:.0f}s"
    by_host: dict[str, list[dict[str, Any]]] = {}
    for edge in edges.values():
        for h in set(edge["hosts"]):
            by_host.setdefault(h, []).append(edge)
    # A node whose every pair failed, with two or more different partners: that node, not its partners.
    for h, its in by_host.items():
        peers = {x for e in its for x in e["hosts"] if x != h}
        if its and all("error" in e for e in its) and len(peers) >= 2 and not problems.get(h):
            problems[h].append(f"no answer over the fabric from {', '.join(sorted(peers))} {wait} ({its[0]['error']})")
    # What is left unexplained: both ends of the failed pair (two nodes cannot tell which one is at fault).
    for edge in edges.values():
        a, b = edge["hosts"]
        if "error" in edge and not problems.get(a) and not problems.get(b):
            for h in (a, b):
                problems[h].append(
                    f"no answer over the fabric between {a} and {b} {wait}, cannot tell which node ({edge['error']})"
                )
    # Bandwidth per node: its best pair on each rail, the worst rail counts.
    scores: dict[str, float] = {}
    for h, its in by_host.items():
        rails: dict[int, float] = {}
        for e in its:
            if "gbytes_per_s" in e:
                rails[e["local"]] = max(rails.get(e["local"], 0.0), e["gbytes_per_s"])
        if rails:
            scores[h] = min(rails.values())
    median = statistics.median(scores.values()) if scores else None
    if median:
        for h, score in scores.items():
            if score < settings.min_bandwidth_ratio * median:
                problems[h].append(
                    f"fabric bandwidth {score:.2f} GB/s is below {settings.min_bandwidth_ratio:g} x "
                    f"the median {median:.2f} GB/s of the job's nodes (a slow link or NIC)"
                )
    all_reduce = next((r["all_reduce"] for r in ranks if r["rank"] == 0 and "all_reduce" in r), None)
    failing = {h: p for h, p in problems.items() if p}
    summary = {
        "backend": next((r.get("backend") for r in ranks), None),
        "interface": settings.interface or "(the hostname's network)",
        "addresses": {r["host"]: r.get("address") for r in ranks if r["local_rank"] == 0},
        "socket_ifname": next((r.get("socket_ifname") for r in ranks), {}),
        "ranks": len(ranks),
        "seconds": max((r.get("seconds", 0.0) for r in ranks), default=0.0),
        # The slowest rank's seconds from its start to the end of each phase (import, join, pairs, all_reduce).
        "phases": {
            name: max(r.get("phases", {}).get(name, 0.0) for r in ranks)
            for name in dict.fromkeys(n for r in ranks for n in r.get("phases", {}))
        },
        "pairs": [
            {
                "hosts": list(e["hosts"]),
                "local_rank": e["local"],
                **{k: e[k] for k in ("gbytes_per_s", "seconds", "error") if k in e},
            }
            for _, e in sorted(edges.items())
        ],
        "node_gbytes_per_s": scores,
        "median_gbytes_per_s": median,
        "all_reduce": all_reduce,
        "bad_nodes": sorted(failing),
        "skipped": skipped,
    }
    return failing, summary


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [f"fabric check skipped on {host}: {why}" for host, why in sorted(summary.get("skipped", {}).items())]
    if not summary["ranks"]:
        return lines
    lines += [
        f"fabric check: {summary['ranks']} ranks, {summary['backend']} over {summary['interface']} "
        f"({', '.join(f'{h} {a}' for h, a in sorted(summary['addresses'].items()) if a) or 'addresses as resolved'}"
        f"), {summary['seconds']:.1f}s"
    ]
    for pair in summary["pairs"]:
        what = f"{pair['gbytes_per_s']:.2f} GB/s" if "gbytes_per_s" in pair else f"FAILED: {pair['error']}"
        lines.append(f"fabric pair {pair['hosts'][0]} <-> {pair['hosts'][1]} (local rank {pair['local_rank']}): {what}")
    if summary.get("all_reduce"):
        ar = summary["all_reduce"]
        lines.append(
            f"fabric all_reduce of {ar['bytes'] / 1024**2:.0f} MiB over {summary['ranks']} ranks: "
            f"{ar['seconds']:.3f}s, bus bandwidth {ar['bus_gbytes_per_s']:.2f} GB/s"
        )
    return lines


def report(output: str, prefix: str, settings: dict[str, Any], attempt_dir: Any) -> dict[str, list[str]]:
    """In the batch shell: the verdict over the preflight's output, logged and written to fabric.json; by host."""
    records = (json.loads(line[len(prefix) :]) for line in output.splitlines() if line.startswith(prefix))
    failing, summary = verdict([r["fabric"] for r in records if "fabric" in r], FabricSettings(**settings))
    for line in summary_lines(summary):
        logger.info(line)
    (Path(attempt_dir) / "fabric.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return failing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m beam_slurm.jobs.ray_cluster.fabric",
        description="One rank of the fabric check (environment: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, "
        "LOCAL_RANK, as torchrun sets them). Rank 0 prints the verdict of all ranks.",
    )
    parser.add_argument("--settings", default="", help="FabricSettings as JSON (what the preflight passes)")
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default=None)
    parser.add_argument("--bytes", type=int, default=None, help="bytes per transfer")
    parser.add_argument(
        "--timeout", dest="timeout_s", type=float, default=None, help="seconds to join, and for each pair"
    )
    parser.add_argument("--interface", default=None, help="interface for the traffic (GLOO/NCCL_SOCKET_IFNAME)")
    parser.add_argument("--host", default=None, help="this node's name in the records (default: the host name)")
    parser.add_argument("--run", default=None, help="the preflight's check id; the preflight gives the verdict")
    args = parser.parse_args(argv)
    settings = FabricSettings(**json.loads(args.settings)) if args.settings else FabricSettings(enabled=True)
    for name in ("backend", "bytes", "timeout_s", "interface"):
        if getattr(args, name) is not None:
            setattr(settings, name, getattr(args, name))
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if v not in os.environ]
    if missing:
        print(f"fabric: {', '.join(missing)} not set; run under torchrun or set them as torchrun does", file=sys.stderr)
        return 2
    try:
        record = run_rank(settings, os.environ, args.host, args.run or "0")
    except Exception as exc:  # reported as this rank's error; the verdict names the node
        record = {
            "rank": int(os.environ["RANK"]),
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "host": args.host or socket.gethostname(),
            "pairs": [],
            "errors": [f"{type(exc).__name__}: {str(exc).strip()[:300]}"],
        }
    gathered = record.pop("gathered", None)
    print(RESULT_PREFIX + json.dumps(record), flush=True)
    if gathered is None or args.run is not None:
        return 0
    silent = [r for r in range(int(os.environ["WORLD_SIZE"])) if r not in {g["rank"] for g in gathered}]
    if silent:
        print(f"fabric FAILED: ranks {silent} did not report within {settings.timeout_s:.0f}s", flush=True)
    failing, summary = verdict(
        [
            {"host": host, "problems": [], "ranks": [g for g in gathered if g["host"] == host]}
            for host in dict.fromkeys(g["host"] for g in gathered)
        ],
        settings,
    )
    for line in summary_lines(summary):
        print(line, flush=True)
    for host, found in sorted(failing.items()):
        for problem in found:
            print(f"fabric FAILED on {host}: {problem}", flush=True)
    return 1 if failing or silent else 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # a pair that never answered leaves a thread blocked in the transport: do not wait for it
