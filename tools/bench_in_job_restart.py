"""A worker's Ray killed, then training again: the restart inside the allocation (with a hot spare, and without one:
the same nodes) against the requeue (`cluster.max_in_job_attempts=0`), side by side in one run on the Slurm sandbox.

    python tools/bench_in_job_restart.py [--repeat 1] [--steps 12] [--case "in-job, same nodes"]

Each case submits `sbatch/train_lora_16gpu.sh` with the rehearsal trainer (1 s steps, a checkpoint every 2 steps),
waits for step 4, SIGKILLs the raylet of the Ray step's second node, and measures from the kill to the first step
the next attempt logs (train_metrics.jsonl): detection, stopping, bring-up, the resume, one step. The requeue
includes Slurm's hold of a requeued job: the job-credential window (`AuthInfo=cred_expire`) + 1 s, 10 s on the
sandbox (Slurm's default is 120 s) - the line below prints the sandbox's value. No queue wait: the sandbox is idle.
Needs the sandbox (`python tools/slurm_sandbox.py up`) and root; the cases run one after another.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_ray_bringup import REPO, sandbox_env  # the sandbox's Slurm environment, read the same way

SCRIPT = REPO / "sbatch" / "train_lora_16gpu.sh"
KEYS = ("cluster.fabric_check=false", "cluster.storage_probe_s=0", "ray.include_dashboard=false",
        "cluster.grace_s=30", "cluster.signal_before_s=120")
CASES = {
    "in-job, spare": (["--nodes=3"], ["cluster.spare_nodes=1"]),
    "in-job, same nodes": ([], []),
    "requeue": ([], ["cluster.max_in_job_attempts=0"]),
}


def raylet_of(job_id: str, node: str) -> int | None:
    """The raylet of the job's first attempt on `node` (the nodes share this machine's process table; the job's folder
    on a node is /tmp/ray-<job>-<attempt>-<random>)."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (b"/raylet/raylet" in cmdline and f"/tmp/ray-{job_id}-0-".encode() in cmdline
                and f"SLURMD_NODENAME={node}".encode() in environ):
            return int(entry)
    return None


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"bench_in_job_restart: timed out after {timeout:.0f} s waiting for {what}")


def steps(export: Path) -> list[dict]:
    path = export / "train_metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def one_case(name: str, env: dict[str, str], root: Path, total_steps: int) -> dict:
    sbatch_args, keys = CASES[name]
    work = Path(tempfile.mkdtemp(prefix="restart-", dir=root))
    for folder in ("model", "data"):
        (work / folder).mkdir()
    job_env = {**env, "MODEL_PATH": str(work / "model"), "DATA_DIR": str(work / "data"),
               "CKPT_PATH": str(work / "ckpt"), "EXPORT_PATH": str(work / "export"),
               "BEAM_TRAINER_BACKEND": "rehearsal", "MAX_TRAINING_STEPS": str(total_steps), "CKPT_INTERVAL": "2",
               "BEAM_REHEARSAL_STEP_SECONDS": "1.0", "BEAM_SLURM_HOME": str(REPO)}
    job = subprocess.run(["sbatch", "--parsable", f"--output={work}/%x-%j.out", "--time=00:10:00", *sbatch_args,
                          str(SCRIPT), *KEYS, *keys], cwd=work, env=job_env, capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    export = work / "export"
    wait_for(lambda: len(steps(export)) >= 4, 300, f"step 4 of job {job} ({name})")
    output = next(work.glob(f"*-{job}.out")).read_text(errors="replace")
    worker = re.search(r"\[ray-node (n\d+) rank 1 ", output).group(1)
    os.kill(wait_for(lambda: raylet_of(job, worker), 20, f"the raylet on {worker}"), 9)
    killed = time.time()
    resumed = wait_for(lambda: next((s for s in steps(export) if s["time"] > killed
                                     and (s["attempt"], s.get("in_job", 0)) != (0, 0)), None), 400,
                       f"the next attempt's first step ({name})")
    wait_for(lambda: subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "State"], env=env,
                                    capture_output=True, text=True).stdout.split()[-1:] in (["COMPLETED"],
                                                                                           ["FAILED"]), 400,
             f"job {job} to end")
    restarts = re.search(r"Restarts=(\d+)", subprocess.run(["scontrol", "show", "job", job], env=env,
                                                           capture_output=True, text=True).stdout)
    return {"case": name, "job": job, "seconds": resumed["time"] - killed, "resumed_at_step": resumed["step"],
            "requeues": int(restarts.group(1)) if restarts else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--case", action="append", choices=[name for name in CASES if name != "requeue"],
                        help="only this case beside the requeue (repeatable); default: every case")
    args = parser.parse_args()
    cases = {name: CASES[name] for name in CASES if not args.case or name in args.case or name == "requeue"}
    env = sandbox_env()
    conf = Path(env["SLURM_CONF"]).read_text()
    window = re.search(r"cred_expire=(\d+)", conf)
    print(f"job-credential window on this sandbox: {window.group(1) + ' s' if window else 'default (120 s)'}")
    root = Path(env["SLURM_CONF"]).parent.parent / "shared" / "bench"
    root.mkdir(parents=True, exist_ok=True)
    run_cases(cases, args.repeat, lambda name: one_case(name, env, root, args.steps), lambda name, result: (
        f"{name:<20} job {result['job']:>5}: worker raylet killed -> training again in {result['seconds']:6.1f} s "
        f"(resumed at step {result['resumed_at_step']}, requeues {result['requeues']})"), "kill -> training again")
    return 0


def run_cases(cases, repeat: int, measure, describe, what: str) -> None:
    """Each case `repeat` times (a line each), then each case's median and how many times longer the requeue took."""
    results: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name in cases:
            result = measure(name)
            results[name].append(result["seconds"])
            print(describe(name, result), flush=True)
    median = {name: statistics.median(values) for name, values in results.items()}
    print(f"\nmedian {what}:")
    for name, value in median.items():
        print(f"  {name:<20} {value:6.1f} s   requeue / this = {median['requeue'] / value:4.2f}")


if __name__ == "__main__":
    sys.exit(main())
