"""Ray bring-up on the Slurm sandbox: job start -> every node and GPU registered, ours against Ray's documented
sleep-based script, with the floor (one bare `ray start --head` on this machine) measured in the same run.

    python tools/bench_ray_bringup.py [--nodes 2 4] [--repeat 1] [--rehearsal-steps 2]

Ours: `python -m beam_slurm.jobs.training.train_job [recipe keys] -- python -c pass` (preflight with its storage write
probe and fabric check, token auth on, GPU check on); ray_ready.json on the head says where the time went: the preflight
window, each node's own `ray start` window, registration and the GPU check (the batch script's first line records
the start). The table splits job start -> every node and GPU registered and checked into (a) the nodes' own
`ray start`, (b) the preflight and (c) ours (the rest), with the target (c) <= 1 s. The last table splits (b): the
fabric check's slowest rank (to the end of its torch import, and in all, from fabric.json) and the slowest node's write
probe (storage_write.json), which run side by side, and (b)+(c) against the first size (target: at most +20 %).
Baseline: Ray's classic slurm-basic.sh pattern (head `srun ... ray start --head --block &`, `sleep 10`, then per
worker `srun ... ray start --address --block &` + `sleep 5`), timed until the script would start the driver; whether
every node had really registered by then is checked and shown. Floor: `ray start --head` alone, on the host.
Needs the sandbox (`python tools/slurm_sandbox.py up`) and root. Runs the jobs one after another so they do not share
the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from beam_slurm.config.ports import choose_ports  # noqa: E402
from beam_slurm.config.ray import RaySettings  # noqa: E402
from beam_slurm.jobs.ray_cluster.local_ray import LocalRay  # noqa: E402

PYTHON = sys.executable
MEMORY_LIGHT_RAY_KEYS = ("ray.object_store_memory_bytes=100000000", "ray.include_dashboard=false",
                         "ray.node_start_concurrency=4")
"""Recipe keys for runs on 8 or 16 sandbox nodes: a 100 MB object store, no dashboard on the head, and 4 nodes
joining at a time (16 at once on 2 cores time out in Ray's fixed 30 s registration wait)."""
RAY = str(Path(PYTHON).with_name("ray"))


def sandbox_env() -> dict[str, str]:
    out = subprocess.run([PYTHON, str(REPO / "tools" / "slurm_sandbox.py"), "env"], capture_output=True, text=True,
                         check=True).stdout
    env = dict(os.environ)
    for token in shlex.split(out.replace("export ", "")):
        key, _, value = token.partition("=")
        env[key] = value
    return env


def shared_dir(env: dict[str, str]) -> Path:
    return Path(env["SLURM_CONF"]).parent.parent / "shared"


def submit(script: str, work: Path, env: dict[str, str]) -> str:
    path = work / "job.sh"
    path.write_text(script)
    return subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, env=env,
                          check=True).stdout.strip().split(";")[0]


def wait_done(job: str, env: dict[str, str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "--noheader", f"--jobs={job}"], capture_output=True, text=True, env=env).stdout
        if not out.strip():
            return
        time.sleep(1)
    raise TimeoutError(f"job {job} still running after {timeout:.0f}s")


def floor_seconds() -> float:
    """One bare `ray start --head` (token auth, per-run temp dir and ports) on this machine."""
    settings = RaySettings()
    folder = Path(tempfile.mkdtemp(prefix="bench-floor-", dir="/tmp"))
    token = folder / "token"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, os.urandom(32).hex().encode())
    os.close(fd)
    ports = choose_ports(settings, os.getpid(), head=True)
    os.mkdir(folder / "r", 0o700)  # LocalRay starts Ray only in a private folder that exists, as a job's
    ray = LocalRay(folder / "r", folder / "ray.log")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}
    started = time.monotonic()
    try:
        ray.start(["--head", "--node-ip-address=127.0.0.1", f"--temp-dir={folder / 'r'}", "--num-gpus=8",
                   "--dashboard-host=127.0.0.1", "--disable-usage-stats", *ports.ray_start_args(head=True)],
                  env, RAY)
        return time.monotonic() - started
    finally:
        ray.stop()


def ours_seconds(nodes: int, env: dict[str, str], preflight: bool = True) -> dict[str, float]:
    """Where one train_job run on `nodes` nodes spent its bring-up (seconds; see `split`)."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-ours-{nodes}-", dir=shared_dir(env)))
    flag = "" if preflight else "--no-preflight"
    # Memory-light Ray on 8 and more sandbox nodes (~0.8 GB per node with Ray's defaults on this machine).
    light = " ".join(MEMORY_LIGHT_RAY_KEYS) if nodes > 4 else ""
    script = f"""#!/bin/bash
#SBATCH --nodes={nodes} --ntasks-per-node=1 --gpus-per-node=8 --exclusive --time=10 --output={work}/slurm-%j.out
export CKPT_PATH={work}/ckpt BEAM_SLURM_STATE_DIR={work}/state
exec {PYTHON} -m beam_slurm.jobs.training.train_job {flag} recipe=lora_16gpu trainer.backend=rehearsal \\
    cluster.nodes={nodes} paths.model_path={work} paths.data_dir={work} paths.log_dir={work}/logs \\
    paths.ckpt_path={work}/ckpt {light} -- {PYTHON} -c pass
"""
    job = submit(script, work, env)
    wait_done(job, env)
    ready_path = work / "logs" / f"{job}-0" / "ray_ready.json"
    if not ready_path.exists():
        raise RuntimeError(f"job {job} did not bring Ray up; see {work}/slurm-{job}.out")
    ready = json.loads(ready_path.read_text())
    for path in (ready_path.parent / "bringup").glob("*.json"):  # every node's own record, written after its start
        node = json.loads(path.read_text())
        if node.get("ray_start"):
            ready.setdefault("ray_starts", {})[node["host"]] = node["ray_start"]
            ready.setdefault("node_starts", {})[node["host"]] = node["node_start"]
    return {**split(ready), **preflight_pieces(ready_path.parent)}


def preflight_pieces(attempt: Path) -> dict[str, float]:
    """Inside the preflight step: the fabric check's slowest rank (to the end of its torch import, and in all) and the
    slowest node's write probe; the step runs the two side by side."""
    out = {"fabric_import": 0.0, "fabric": 0.0, "write_probe": 0.0}
    if (attempt / "fabric.json").exists():
        fabric = json.loads((attempt / "fabric.json").read_text())
        out["fabric_import"] = fabric.get("phases", {}).get("import", 0.0)
        out["fabric"] = fabric.get("seconds", 0.0)
    if (attempt / "storage_write.json").exists():
        writes = json.loads((attempt / "storage_write.json").read_text()).values()
        out["write_probe"] = max((w["write"]["seconds"] for w in writes if "write" in w), default=0.0)
    return out


def rehearsal_run(nodes: int, steps: int, env: dict[str, str]) -> tuple[str, float, list[int]]:
    """A real rehearsal training job of `steps` steps on `nodes` nodes (the recipe's trainer, every GPU an actor):
    (final state, seconds from submit to its end, the steps train_metrics.jsonl recorded)."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-rehearsal-{nodes}-", dir=shared_dir(env)))
    for folder in ("model", "data"):
        (work / folder).mkdir()
    light = " ".join(MEMORY_LIGHT_RAY_KEYS) if nodes > 4 else ""
    script = f"""#!/bin/bash
#SBATCH --nodes={nodes} --ntasks-per-node=1 --gpus-per-node=8 --exclusive --time=15 --output={work}/slurm-%j.out
export BEAM_SLURM_STATE_DIR={work}/state
exec {PYTHON} -m beam_slurm.cli train recipe=lora_16gpu trainer.backend=rehearsal cluster.nodes={nodes} \
    max_training_steps={steps} checkpoint.interval={steps} paths.model_path={work}/model paths.data_dir={work}/data \
    paths.log_dir={work}/logs paths.ckpt_path={work}/ckpt paths.export_path={work}/export {light}
"""
    started = time.monotonic()
    job = submit(script, work, env)
    wait_done(job, env, timeout=900)
    seconds = time.monotonic() - started
    state = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job], capture_output=True, text=True,
                           env=env).stdout.strip().split("\n")[0]
    metrics = work / "export" / "train_metrics.jsonl"
    done = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()] \
        if metrics.exists() else []
    return state or "?", seconds, done


def union_seconds(windows: list[list[float]]) -> float:
    """Length of the union of [began, ended] windows: the time during which at least one was running."""
    total, reach = 0.0, float("-inf")
    for began, ended in sorted(windows):
        if ended > reach:
            total += ended - max(began, reach)
            reach = ended
    return total


def split(ready: dict) -> dict[str, float]:
    """From ray_ready.json: total (job start -> every node and GPU registered and checked), (a) the nodes' own
    `ray start` (the union of their windows: Ray's work on the critical path), (b) the preflight step, (c) ours =
    total - a - b, and the pieces of (c): the batch shell before the preflight, preflight end -> Ray step launch,
    launch -> last node process up (srun + Python start), waiting after the last `ray start` returned until the GCS
    listed every GPU, and the GPU check."""
    start = ready["job_start"]
    windows = [w for w in ready.get("ray_starts", {}).values() if w]
    pre = ready.get("preflight") or [start, start]
    out = {"total": ready["gpus_checked"] - start, "ray_start": union_seconds(windows),
           "preflight": pre[1] - pre[0]}
    out["ours"] = out["total"] - out["ray_start"] - out["preflight"]
    launch = ready.get("ray_step_launch") or pre[1]
    out["batch_shell"] = (pre[0] if ready.get("preflight") else launch) - start
    out["to_ray_step"] = launch - pre[1] if ready.get("preflight") else 0.0
    out["srun_python"] = max(ready.get("node_starts", {}).values(), default=launch) - launch
    out["registration_wait"] = ready["registered"] - max((w[1] for w in windows), default=ready["registered"])
    out["gpu_check"] = ready["gpus_checked"] - ready["registered"]
    out["client_release"] = ready.get("client_released", ready["gpus_checked"]) - ready["gpus_checked"]
    out["gpus"] = ready.get("gpus", 0)
    out["nodes_timed"] = len(windows)
    return out


def baseline_seconds(nodes: int, env: dict[str, str]) -> tuple[float, str]:
    """(job start -> where Ray's documented script starts the driver, how many nodes had registered by then)."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-docs-{nodes}-", dir=shared_dir(env)))
    settings = RaySettings(port_range_start=33000 - 8 * 400, port_range_end=33000 - 4 * 400)
    ports = choose_ports(settings, nodes, head=True)
    worker_ports = " ".join(ports.ray_start_args(head=False))
    count_nodes = (f"import ray; ray.init(address='$head_ip:{ports.gcs}', logging_level='ERROR'); "
                   "print(len([n for n in ray.nodes() if n['Alive']]))")
    # Ray's classic slurm-basic.sh, with this job's ports and temp dir so it cannot meet another job's Ray.
    script = f"""#!/bin/bash
#SBATCH --nodes={nodes} --ntasks-per-node=1 --gpus-per-node=8 --exclusive --time=10 --output={work}/slurm-%j.out
start=$(date +%s.%N)
export RAY_USAGE_STATS_ENABLED=0
nodes_array=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_node=${{nodes_array[0]}}
head_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
srun --nodes=1 --ntasks=1 --mem=1000 -w "$head_node" {RAY} start --head --node-ip-address="$head_ip" \\
  {' '.join(ports.ray_start_args(head=True))} --temp-dir=/tmp/bench-docs-$SLURM_JOB_ID --num-gpus=8 --block &
sleep 10
for ((i = 1; i < {nodes}; i++)); do
  srun --nodes=1 --ntasks=1 --mem=1000 -w "${{nodes_array[$i]}}" {RAY} start --address "$head_ip:{ports.gcs}" \\
    {worker_ports} --temp-dir=/tmp/bench-docs-$SLURM_JOB_ID --num-gpus=8 --block &
  sleep 5
done
proceed=$(date +%s.%N)
registered=$(srun --overlap --mem=200 --nodes=1 --ntasks=1 -w "$head_node" {PYTHON} -c "{count_nodes}" 2>/dev/null \\
  | tail -1)
echo "{{\\"start\\": $start, \\"proceed\\": $proceed, \\"registered_nodes\\": \\"$registered\\"}}" > {work}/timing.json
# End this job's Ray: the processes under its temp dir on each node, by pid.
srun --overlap --mem=200 --nodes={nodes} --ntasks-per-node=1 {PYTHON} -c "
import os, signal
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        cmd = open(f'/proc/{{pid}}/cmdline', 'rb').read()
    except OSError:
        continue
    if b'/tmp/bench-docs-$SLURM_JOB_ID' in cmd:
        os.kill(int(pid), signal.SIGKILL)
"
"""
    job = submit(script, work, env)
    wait_done(job, env)
    timing = json.loads((work / "timing.json").read_text())
    return timing["proceed"] - timing["start"], f"{timing['registered_nodes'] or '?'}/{nodes}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration; the median is shown")
    parser.add_argument("--no-baseline", action="store_true", help="skip Ray's documented sleep-based script")
    parser.add_argument("--rehearsal-steps", type=int, default=0,
                        help="then run a rehearsal training job of this many steps on the largest node count")
    args = parser.parse_args(argv)
    env = sandbox_env()
    floors = sorted(floor_seconds() for _ in range(args.repeat))
    floor = floors[len(floors) // 2]
    rows = []
    for nodes in args.nodes:
        runs = [ours_seconds(nodes, env) for _ in range(args.repeat)]
        median = {key: sorted(r[key] for r in runs)[len(runs) // 2] for key in runs[0]}
        docs = None if args.no_baseline else sorted(baseline_seconds(nodes, env) for _ in range(args.repeat))
        rows.append((nodes, median, docs[len(docs) // 2] if docs else None))
    print(f"floor: one bare `ray start --head` on this machine: {floor:.1f} s (median of {args.repeat})")
    print()
    header = ("nodes", "GPUs", "total", "(a) ray start", "(b) preflight", "(c) ours", "(c) target", "GPU check",
              "(a+c)/floor", "docs sleeps")
    print(" | ".join(f"{h:>13}" for h in header))
    for nodes, m, docs in rows:
        verdict = "ok" if m["ours"] <= 1.0 else f"+{m['ours'] - 1.0:.1f} s"
        cells = (str(nodes), str(int(m["gpus"])), f"{m['total']:.1f} s", f"{m['ray_start']:.1f} s",
                 f"{m['preflight']:.1f} s", f"{m['ours']:.1f} s", f"<=1 s {verdict}", f"{m['gpu_check']:.1f} s",
                 f"{(m['ray_start'] + m['ours']) / floor:.2f}x",
                 f"{docs[0]:.1f} s ({docs[1]})" if docs else "-")
        print(" | ".join(f"{c:>13}" for c in cells))
    print()
    print("(c) ours, in pieces (median):")
    pieces = ("batch_shell", "to_ray_step", "srun_python", "registration_wait", "gpu_check", "client_release")
    print(" | ".join(f"{h:>17}" for h in ("nodes", *pieces)))
    for nodes, m, _ in rows:
        print(" | ".join(f"{c:>17}" for c in (str(nodes), *(f"{m[p]:.2f} s" for p in pieces))))
    print()
    print("times from the first line of the batch script to every node and GPU registered and checked; (a) is the "
          "union of the nodes' own `ray start` windows, (b) the preflight step (storage write probe, fabric check), "
          "(c) the rest; the pieces of (c) overlap (a) where nodes start in parallel (registration_wait < 0: the GCS "
          "listed a node before its `ray start` returned); client_release (the head's Ray client disconnecting before "
          "the driver starts) comes after the total. The docs script sleeps 10 s + "
          "5 s per worker and never checks (nodes registered by then in brackets).")
    print()
    print("(b) preflight, in pieces (median; the fabric check and the write probe run side by side on every node):")
    base = rows[0][1]["preflight"] + rows[0][1]["ours"]
    print(" | ".join(f"{h:>17}" for h in ("nodes", "fabric_import", "fabric", "write_probe", "(b)+(c)", "vs first")))
    for nodes, m, _ in rows:
        both = m["preflight"] + m["ours"]
        cells = (str(nodes), f"{m['fabric_import']:.2f} s", f"{m['fabric']:.2f} s", f"{m['write_probe']:.2f} s",
                 f"{both:.1f} s", f"{100 * (both / base - 1):+.0f} %")
        print(" | ".join(f"{c:>17}" for c in cells))
    if args.rehearsal_steps:
        nodes = max(args.nodes)
        state, seconds, done = rehearsal_run(nodes, args.rehearsal_steps, env)
        print()
        print(f"rehearsal training on {nodes} nodes ({nodes * 8} GPU actors), {args.rehearsal_steps} steps: {state} "
              f"in {seconds:.0f} s (submit to end), steps recorded {done}")
        if state != "COMPLETED" or done != list(range(1, args.rehearsal_steps + 1)):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
