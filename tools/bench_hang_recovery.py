"""A GPU actor that stops making progress, then training again: the hang watchdog's detection, the dumps of every
node, the end of the step, and the restart inside the allocation against the requeue
(`cluster.max_in_job_attempts=0`), side by side in one run on the Slurm sandbox.

    python tools/bench_hang_recovery.py [--repeat 1] [--timeout 15]

Each case submits `sbatch/train_lora_16gpu.sh` with the rehearsal trainer (1 s steps, a checkpoint every 3 steps)
and `trainer.rehearsal_hang_at_step=6`: the last bundle's actor blocks for good in step 6, the trainer does not
know. It measures from the step before the hang (the last training the run logged, train_metrics.jsonl) to the
first step of the next attempt, and from the watchdog's finding (the run record's `hang_detected_at`) to that step,
and sums the dump set the attempt left in its log folder's hang/. No queue wait: the sandbox is idle. Needs the sandbox (`python tools/slurm_sandbox.py up`).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_in_job_restart import SCRIPT, run_cases, steps, wait_for
from bench_ray_bringup import REPO, sandbox_env

KEYS = ("cluster.fabric_check=false", "cluster.storage_probe_s=0", "ray.include_dashboard=false",
        "cluster.grace_s=30", "cluster.signal_before_s=120", "trainer.rehearsal_save_s=0",
        "trainer.rehearsal_hang_at_step=6")
CASES = {"in-job restart": [], "requeue": ["cluster.max_in_job_attempts=0"]}


def sacct_state(job: str, env: dict[str, str]) -> str:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "State"], env=env, capture_output=True,
                         text=True).stdout.split()
    return out[-1] if out else ""


def one_case(name: str, env: dict[str, str], root: Path, timeout_s: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="hang-", dir=root))
    for folder in ("model", "data"):
        (work / folder).mkdir()
    job_env = {**env, "MODEL_PATH": str(work / "model"), "DATA_DIR": str(work / "data"),
               "CKPT_PATH": str(work / "ckpt"), "EXPORT_PATH": str(work / "export"),
               "BEAM_TRAINER_BACKEND": "rehearsal", "MAX_TRAINING_STEPS": "10", "CKPT_INTERVAL": "3",
               "BEAM_REHEARSAL_STEP_SECONDS": "1.0", "BEAM_SLURM_HOME": str(REPO)}
    job = subprocess.run(["sbatch", "--parsable", f"--output={work}/%x-%j.out", "--time=00:10:00", str(SCRIPT),
                          *KEYS, f"cluster.hang_timeout_s={timeout_s}", *CASES[name]], cwd=work, env=job_env,
                         capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    export = work / "export"
    wait_for(lambda: sacct_state(job, env) in ("COMPLETED", "FAILED", "CANCELLED"), 400, f"job {job} to end")
    rows = steps(export)
    first_attempt = [s for s in rows if (s["attempt"], s.get("in_job", 0)) == (0, 0)]
    later = [s for s in rows if (s["attempt"], s.get("in_job", 0)) != (0, 0)]
    if not first_attempt or not later:
        raise SystemExit(f"bench_hang_recovery: job {job} ({name}) logged no second attempt: see {work}")
    hung_at, again = first_attempt[-1]["time"], later[0]["time"]
    log = (export / "logs" / f"{job}-0" / "train_job.log").read_text(errors="replace")
    found = re.search(r"hang at step (\d+) \((\w[\w-]*)\): no progress for (\d+) s", log)
    dumps = export / "logs" / f"{job}-0" / "hang"
    files = [p for p in dumps.rglob("*") if p.is_file()]
    return {"job": job, "state": sacct_state(job, env), "seconds": again - hung_at,
            "after_finding": again - finding_time(export, job),
            "silent_s": int(found.group(3)) if found else None, "dump_files": len(files),
            "dump_bytes": sum(p.stat().st_size for p in files),
            "dump_nodes": len([p for p in dumps.iterdir() if p.is_dir()]) if dumps.is_dir() else 0}


def finding_time(export: Path, job: str) -> float:
    """When the watchdog found the hang: the first attempt's `hang_detected_at` in the run record."""
    record = json.loads((export / "beam_run" / "run.json").read_text())
    first = next(a for a in record["train_jobs"][job]["attempts"] if (a["attempt"], a.get("in_job", 0)) == (0, 0))
    return float(first.get("hang_detected_at") or first["extra"]["hang_detected_at"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=15, help="cluster.hang_timeout_s of each run")
    args = parser.parse_args()
    env = sandbox_env()
    root = Path(env["SLURM_CONF"]).parent.parent / "shared" / "bench"
    root.mkdir(parents=True, exist_ok=True)
    print(f"cluster.hang_timeout_s={args.timeout}; the watchdog reads the heartbeat every 2 s")
    after: dict[str, list[float]] = {name: [] for name in CASES}

    def measure(name: str) -> dict:
        result = one_case(name, env, root, args.timeout)
        after[name].append(result["after_finding"])
        return result

    run_cases(CASES, args.repeat, measure, lambda name, r: (
        f"{name:<15} job {r['job']:>5} {r['state']}: last step before the hang -> training again in "
        f"{r['seconds']:6.1f} s (found after {r['silent_s']} s silent; the finding -> training again "
        f"{r['after_finding']:5.1f} s); dump set {r['dump_files']} files, {r['dump_bytes'] / 1024:.0f} KiB over "
        f"{r['dump_nodes']} nodes"), "last step before the hang -> training again")
    print("\nmedian the watchdog's finding -> training again:")
    for name, values in after.items():
        print(f"  {name:<20} {statistics.median(values):6.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
