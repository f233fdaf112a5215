"""Benchmark: whole-process wall time of `beam-slurm plan`, of `beam-slurm submit -m` for a 2 x 2 and a 64-point
(4 x 4 x 4) sweep on the Slurm sandbox until the command returns with every job queued, and of `beam-slurm status`
over the 64 runs (one table; the refresh `status --watch` repeats) (median of several runs).

    .venv/bin/python tools/bench_submit.py [--runs 5]

Needs the sandbox (tools/slurm_sandbox.py up; run as root). The 2 x 2 sweep is precision=bf16,mxfp8 x lora.rank=0,8
on lora_16gpu: 3 valid points and 1 invalid (mxfp8 with LoRA), skipped with --skip-invalid. The 64-point sweep is
algorithm.lr x lora.rank x generation.temperature (4 values each) on lora_16gpu. Stages data + train: one shared data
job and one training job per point. Training jobs are held at submission (`cluster.extra_sbatch_args=['--hold']`), so
they are queued (what is measured) but never start; the data job may start and fails at once (no sources), which
costs the sandbox a second. Each submission uses a fresh run folder so nothing is skipped; every job it queued is
cancelled right after timing. Targets: plan < 1 s, 2 x 2 sweep < 5 s, 64-point sweep < 10 s, status of 64 runs < 2 s
with one squeue and one sacct call (the count is read from the scheduler wrappers in a status run of its own). For
scale, the same table shows one bare `sbatch --wrap true` (the floor of any submission), one `squeue` and one
`sacct` call, and `python -c pass`.
"""

from __future__ import annotations

import argparse
import json
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
    # What plan's and submit's submit-host path check look for: a SkyRL checkout and the data files.
    (work / "skyrl" / "examples" / "train" / "algorithms" / "dapo").mkdir(parents=True)
    (work / "skyrl" / "examples" / "train" / "algorithms" / "dapo" / "main_dapo.py").touch()
    for name in ("dapo-math-17k-cleaned.parquet", "aime-2025-cleaned.parquet", "aime-2024-cleaned.parquet"):
        (work / "data" / name).touch()
    env = {**os.environ, "SLURM_CONF": str(conf), "HOME": str(work / "home"), "MODEL_PATH": str(work / "model"),
           "DATA_DIR": str(work / "data"), "SKYRL_DIR": str(work / "skyrl"), "SBATCH_MEM_PER_NODE": "100M",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)}
    for name in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "XDG_STATE_HOME"):
        env.pop(name, None)
    cli = [PYTHON, "-m", "beam_slurm.cli"]
    plan_cmd = [*cli, "plan", "recipe=lora_16gpu"]
    names = ["python -c pass", "sbatch --wrap true (1 job)", "squeue (all jobs, 1 call)", "sacct (65 jobs, 1 call)",
             "beam-slurm plan", "beam-slurm submit -m (2 x 2)", "beam-slurm submit -m (4 x 4 x 4)",
             "beam-slurm status (64 runs)", "beam-slurm status --json (64 runs)"]
    timings: dict[str, list[float]] = {name: [] for name in names}
    jobs_per_sweep = jobs_per_big = 0
    calls = {}
    held = ["trainer.backend=rehearsal", "cluster.extra_sbatch_args=['--hold']"]
    try:
        timed(plan_cmd, env)  # warm the file cache once; every measured run is a new process
        for run in range(args.runs):
            timings["python -c pass"].append(timed([PYTHON, "-c", "pass"], env)[0])
            elapsed, out = timed(["sbatch", "--parsable", "--hold", "--mem=100M", "--wrap", "true"], env)
            timings["sbatch --wrap true (1 job)"].append(elapsed)
            cancel([out.strip().split(";")[0]], env)
            timings["beam-slurm plan"].append(timed(plan_cmd, env)[0])
            sweep = [*cli, "submit", "-m", "--stages", "data,train", "recipe=lora_16gpu", "precision=bf16,mxfp8",
                     "lora.rank=0,8", f"run_name=bench{run}", "lora.alpha=8", *held]
            # lora.rank=8 with mxfp8 is invalid (full-parameter only): use --skip-invalid and count what was queued.
            elapsed, out = timed([*sweep, "--skip-invalid"], env)
            timings["beam-slurm submit -m (2 x 2)"].append(elapsed)
            ids = queued_ids(out, env)
            jobs_per_sweep = len(ids)
            cancel(ids, env)

            big = [*cli, "submit", "-m", "--stages", "data,train", "recipe=lora_16gpu", f"run_name=big{run}", *held,
                   "algorithm.lr=1e-5,2e-5,3e-5,4e-5", "lora.rank=8,16,32,64", "generation.temperature=0.7,0.8,0.9,1.0"]
            elapsed, out = timed(big, env)
            timings["beam-slurm submit -m (4 x 4 x 4)"].append(elapsed)
            ids = queued_ids(out, env)
            jobs_per_big = len(ids)
            sweep_dir = out.strip().splitlines()[-1].split()[1]
            timings["squeue (all jobs, 1 call)"].append(
                timed(["squeue", "--noheader", "--states=all", "-O", "JobID:|,State:|,Dependency:|"], env)[0])
            timings["sacct (65 jobs, 1 call)"].append(timed(["sacct", "--noheader", "--parsable2", "-X", "-D",
                                                             f"--jobs={','.join(ids)}", "--format=JobID,State"], env)[0])
            timings["beam-slurm status (64 runs)"].append(timed([*cli, "status", sweep_dir], env)[0])
            timings["beam-slurm status --json (64 runs)"].append(timed([*cli, "status", "--json", sweep_dir], env)[0])
            if run == 0:
                calls = count_scheduler_calls(sweep_dir, env)
            cancel(ids, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    floor = statistics.median(timings["python -c pass"])
    print(f"\nwhole-process wall time, median of {args.runs} runs (sandbox: 2 x 2 sweep = {jobs_per_sweep} jobs "
          f"(1 shared data job + {jobs_per_sweep - 1} training jobs; 1 invalid point skipped); 4 x 4 x 4 sweep = "
          f"{jobs_per_big} jobs)\n")
    print(f"{'command':<36} {'median s':>9} {'min s':>7} {'max s':>7} {'x python':>9} {'target':>10}")
    targets = {"beam-slurm plan": 1.0, "beam-slurm submit -m (2 x 2)": 5.0, "beam-slurm submit -m (4 x 4 x 4)": 10.0,
               "beam-slurm status (64 runs)": 2.0, "beam-slurm status --json (64 runs)": 2.0}
    for name, values in timings.items():
        median = statistics.median(values)
        target = targets.get(name)
        verdict = "" if target is None else (f"< {target:.0f} s " + ("ok" if median < target else "MISSED"))
        print(f"{name:<36} {median:>9.3f} {min(values):>7.3f} {max(values):>7.3f} {median / floor:>9.1f} {verdict:>10}")
    sbatch = statistics.median(timings["sbatch --wrap true (1 job)"])
    big = statistics.median(timings["beam-slurm submit -m (4 x 4 x 4)"])
    print(f"\n64-point sweep = {big / sbatch:.1f} x one bare sbatch call for {jobs_per_big} jobs "
          f"({big / max(jobs_per_big, 1):.3f} s per job queued; {jobs_per_big} bare sbatch calls in a row would take "
          f"~{sbatch * jobs_per_big:.1f} s)")
    print(f"scheduler calls of one `status` over the 64 runs: {calls.get('squeue')} squeue, {calls.get('sacct')} sacct "
          "(target: 1 and 1)")
    refresh = calls.get("refresh_s", float("nan"))
    per = calls.get("refresh_calls", {})
    print(f"one `status --watch` refresh of the 64 runs (collect + table, in process, median of 3): {refresh:.3f} s "
          f"(target < 2 s: {'ok' if refresh < 2 else 'MISSED'}), {per.get('squeue')} squeue and {per.get('sacct')} "
          "sacct per refresh")
    return 0


def queued_ids(out: str, env: dict[str, str]) -> list[str]:
    """Job ids submit printed, checked against squeue: every one must be queued when submit returned."""
    ids = sorted(set(re.findall(r"\bjob (\d+)", out)))
    queued = subprocess.run(["squeue", "--noheader", "--states=all", "-o", "%i", f"--jobs={','.join(ids)}"], env=env,
                            capture_output=True, text=True, timeout=60).stdout.split()
    if sorted(queued) != ids:
        raise SystemExit(f"not every job was queued when submit returned: {ids} vs {queued}")
    return ids


def count_scheduler_calls(sweep_dir: str, env: dict[str, str]) -> dict[str, int]:
    """squeue/sacct calls of one `status` (in a process of its own, counting the calls of the scheduler wrappers)."""
    code = ("import json, sys\n"
            "from beam_slurm.slurm import scheduler\n"
            "from beam_slurm.verbs import status\n"
            "calls = {'squeue': 0, 'sacct': 0}\n"
            "real_q, real_a = scheduler.squeue_rows, scheduler.sacct_rows\n"
            "def q():\n    calls['squeue'] += 1\n    return real_q()\n"
            "def a(ids):\n    calls['sacct'] += 1\n    return real_a(ids)\n"
            "scheduler.squeue_rows, scheduler.sacct_rows = q, a\n"
            "import contextlib, io, time\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    status.main([sys.argv[1], '--json'])\n"
            "counted = dict(calls)  # one status run; the refreshes below count on\n"
            "from rich.console import Console\n"
            "paths, title = status.resolve_targets(sys.argv[1])\n"
            "times = []\n"
            "for _ in range(3):  # what one refresh of status --watch does: collect, then render the table\n"
            "    started = time.perf_counter()\n"
            "    Console(file=io.StringIO(), width=160).print(status.render_table(status.collect(paths), title))\n"
            "    times.append(time.perf_counter() - started)\n"
            "counted['refresh_s'] = sorted(times)[1]\n"
            "counted['refresh_calls'] = {k: (calls[k] - counted[k]) / 3 for k in ('squeue', 'sacct')}\n"
            "print(json.dumps(counted))\n")
    return json.loads(timed([PYTHON, "-c", code, sweep_dir], env)[1].strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
