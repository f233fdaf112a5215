"""Benchmark: whole-process wall time of `beam-slurm plan` and of `beam-slurm submit -m` for a 2 x 2 sweep on the
Slurm sandbox, until the command returns with every job queued (median of several runs).

    .venv/bin/python tools/bench_submit.py [--runs 5]

Needs the sandbox (tools/slurm_sandbox.py up; run as root). The sweep is precision=bf16,mxfp8 x lora.rank=0,8 on
lora_16gpu: 3 valid points and 1 invalid (mxfp8 with LoRA), skipped with --skip-invalid; stages data + train: one shared data job and three training jobs per submission. Each
submission uses a fresh run folder so nothing is skipped; every job it queued is cancelled right after timing
(jobs are held at submission so the sandbox never runs them). Targets: plan < 1 s, sweep < 5 s. For scale, the
same table shows one bare `sbatch --wrap true` (the floor of any submission) and `python -c pass`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANDBOX_DIR = Path(os.environ.get("BEAM_SANDBOX_DIR", "/var/tmp/beam-slurm-sandbox"))
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])}... failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed, done.stdout


def cancel(job_ids: list[str], env: dict[str, str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], env=env, capture_output=True, timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (median reported)")
    args = parser.parse_args()
    conf = SANDBOX_DIR / "etc" / "slurm.conf"
    if not conf.is_file() or not shutil.which("sbatch"):
        print(f"the Slurm sandbox is not set up ({conf}); run `tools/slurm_sandbox.py up` as root", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-submit-", dir=SANDBOX_DIR / "shared"))
    for sub in ("model", "skyrl", "data", "home"):
        (work / sub).mkdir()
    env = {**os.environ, "SLURM_CONF": str(conf), "HOME": str(work / "home"), "MODEL_PATH": str(work / "model"),
           "DATA_DIR": str(work / "data"), "SKYRL_DIR": str(work / "skyrl"), "SBATCH_MEM_PER_NODE": "100M",
           # Held at submission: queued (what is measured) but never started, so nothing runs on the sandbox.
           "SBATCH_HOLD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    for name in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "XDG_STATE_HOME"):
        env.pop(name, None)
    cli = [PYTHON, "-m", "beam_slurm.cli"]
    plan_cmd = [*cli, "plan", "recipe=lora_16gpu"]
    timings: dict[str, list[float]] = {"python -c pass": [], "sbatch --wrap true (1 job)": [], "beam-slurm plan": [],
                                       "beam-slurm submit -m (2 x 2)": []}
    jobs_per_sweep = 0
    try:
        timed(plan_cmd, env)  # warm the file cache once; every measured run is a new process
        for run in range(args.runs):
            timings["python -c pass"].append(timed([PYTHON, "-c", "pass"], env)[0])
            elapsed, out = timed(["sbatch", "--parsable", "--mem=100M", "--wrap", "true"], env)
            timings["sbatch --wrap true (1 job)"].append(elapsed)
            cancel([out.strip().split(";")[0]], env)
            timings["beam-slurm plan"].append(timed(plan_cmd, env)[0])
            sweep = [*cli, "submit", "-m", "--stages", "data,train", "recipe=lora_16gpu", "precision=bf16,mxfp8",
                     "lora.rank=0,8", f"run_name=bench{run}", "lora.alpha=8", "trainer.backend=rehearsal"]
            # lora.rank=8 with mxfp8 is invalid (full-parameter only): use --skip-invalid and count what was queued.
            elapsed, out = timed([*sweep, "--skip-invalid"], env)
            timings["beam-slurm submit -m (2 x 2)"].append(elapsed)
            ids = sorted(set(re.findall(r"\bjob (\d+)", out)))
            jobs_per_sweep = len(ids)
            queued = subprocess.run(["squeue", "--noheader", "-o", "%i", f"--jobs={','.join(ids)}"], env=env,
                                    capture_output=True, text=True, timeout=60).stdout.split()
            if sorted(queued) != ids:
                raise SystemExit(f"not every job was queued when submit returned: {ids} vs {queued}")
            cancel(ids, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    floor = statistics.median(timings["python -c pass"])
    print(f"\nwhole-process wall time, median of {args.runs} runs (sandbox: {jobs_per_sweep} jobs per sweep "
          f"submission = 1 shared data job + {jobs_per_sweep - 1} training jobs; 1 invalid point skipped)\n")
    print(f"{'command':<32} {'median s':>9} {'min s':>7} {'max s':>7} {'x python':>9} {'target':>8}")
    targets = {"beam-slurm plan": 1.0, "beam-slurm submit -m (2 x 2)": 5.0}
    for name, values in timings.items():
        median = statistics.median(values)
        target = targets.get(name)
        verdict = "" if target is None else (f"< {target:.0f} s " + ("ok" if median < target else "MISSED"))
        print(f"{name:<32} {median:>9.3f} {min(values):>7.3f} {max(values):>7.3f} {median / floor:>9.1f} {verdict:>8}")
    sbatch = statistics.median(timings["sbatch --wrap true (1 job)"])
    sweep = statistics.median(timings["beam-slurm submit -m (2 x 2)"])
    print(f"\nsweep submission = {sweep / sbatch:.1f} x one bare sbatch call for {jobs_per_sweep} jobs "
          f"({sweep / max(jobs_per_sweep, 1):.3f} s per job queued)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
