"""Benchmark: evaluating N checkpoints as one job array vs N separate submissions, and what a resumed evaluation
saves after a kill at 50 %, on the Slurm sandbox with vLLM's CPU build and a tiny random model.

    .venv/bin/python tools/bench_eval_array.py [--checkpoints 3] [--k 4] [--parts array,resume]

Needs the sandbox (tools/slurm_sandbox.py up; run as root) and vLLM's CPU build. Every evaluation runs on the
sandbox through `beam-slurm evaluate`:

- array: `beam-slurm evaluate RUN --wait` over a run folder with N exports (one submission, one array);
- separate: N `beam-slurm evaluate --checkpoint EXPORT` submissions one after the other (N jobs), then waiting
  for all of them; both measured from the first command to the last job's end;
- resume: one checkpoint evaluated with one problem per chunk, cancelled (scancel) once half of its responses are
  saved, then submitted again: the responses the second job found saved (reused) over the total, and its wall time
  beside that of the same evaluation from scratch.

The tiny model's numbers measure the scheduling and the job machinery (vLLM's start-up dominates), not GPU
generation speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANDBOX_DIR = Path(os.environ.get("BEAM_SANDBOX_DIR", "/var/tmp/beam-slurm-sandbox"))
PYTHON = str(ROOT / ".venv" / "bin" / "python")
sys.path.insert(0, str(ROOT / "tests" / "support"))

CPU_ENGINE = ["rollout.tensor_parallel=1", "rollout.pipeline_parallel=1", "eval.dtype=float32",
              "eval.gpu_memory_utilization=0.05", "eval.enforce_eager=true", "generation.max_prompt_tokens=256",
              "grade.workers=1", "eval.chain_settle_s=0"]
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


class Bench:
    def __init__(self, work: Path, env: dict[str, str], args: argparse.Namespace):
        self.work, self.env, self.args = work, env, args
        self.name = f"bench-eval-{uuid.uuid4().hex[:6]}"
        self.data = work / "aime-bench-cleaned.parquet"

    def evaluate(self, *argv: str, timeout: float = 1200) -> str:
        done = subprocess.run([PYTHON, "-m", "beam_slurm.cli", "evaluate", *argv, "--data", str(self.data),
                               f"eval.responses_per_problem={self.args.k}",
                               f"generation.max_response_tokens={self.args.max_tokens}", *CPU_ENGINE,
                               f"eval.launcher.name={self.name}"],
                              capture_output=True, text=True, env=self.env, timeout=timeout, cwd=self.work)
        if done.returncode != 0:
            raise SystemExit(f"evaluate {' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def jobs(self) -> dict[str, str]:
        """job id -> state of everything this benchmark submitted."""
        for _ in range(30):  # a restarted controller or slurmdbd answers again within seconds
            done = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,State", "--name", self.name, "-S",
                                   "now-3hours"], capture_output=True, text=True, env=self.env, timeout=60)
            if done.returncode == 0:
                return {line.split("|")[0]: line.split("|")[1].split()[0] for line in done.stdout.splitlines() if line}
            time.sleep(2.0)
        raise SystemExit(f"sacct failed: {done.stderr.strip()}")

    def wait(self, ids: set[str], timeout: float = 1800) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = {j: s for j, s in self.jobs().items() if j in ids}
            if len(states) == len(ids) and all(s in FINAL for s in states.values()):
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"jobs not finished after {timeout:.0f} s: {states}")
            time.sleep(1.0)

    @staticmethod
    def job_of(stdout: str) -> str:
        """The job id `evaluate` printed (sacct may not list a job in the first second after its submission)."""
        found = re.search(r"-> job array (\d+)", stdout)
        if not found:
            raise SystemExit(f"evaluate submitted nothing:\n{stdout}")
        return found.group(1)


def exports(model: Path, run: Path, steps: list[int]) -> Path:
    for step in steps:
        shutil.copytree(model, run / f"global_step_{step}" / "policy")
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=3, help="N: checkpoints evaluated each way")
    parser.add_argument("--problems", type=int, default=20, help="problems per evaluation (array vs separate)")
    parser.add_argument("--k", type=int, default=4, help="responses per problem")
    parser.add_argument("--max-tokens", type=int, default=96, help="token budget per response (array vs separate)")
    parser.add_argument("--resume-problems", type=int, default=40,
                        help="problems of the resumed evaluation (one per chunk)")
    parser.add_argument("--resume-max-tokens", type=int, default=256,
                        help="token budget of the resumed evaluation: long enough for the kill to land half-way")
    parser.add_argument("--parts", default="array,resume", help="what to measure: array, resume or both")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    conf = SANDBOX_DIR / "etc" / "slurm.conf"
    if not conf.is_file() or not shutil.which("sbatch"):
        print(f"the Slurm sandbox is not set up ({conf}); run `tools/slurm_sandbox.py up` as root", file=sys.stderr)
        return 2
    if not parts or not parts <= {"array", "resume"}:
        print(f"--parts {args.parts}: say array, resume or array,resume", file=sys.stderr)
        return 2
    from aime_files import write_aime_parquet
    from tiny_model import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="bench-eval-array-", dir=SANDBOX_DIR / "shared"))
    env = {**os.environ, "SLURM_CONF": str(conf), "VLLM_LOGGING_LEVEL": "WARNING", "PYTHONDONTWRITEBYTECODE": "1"}
    bench = Bench(work, env, args)

    def problems(path: Path, count: int) -> Path:
        return write_aime_parquet(path, ground_truths=[str(n) for n in range(count)],
                                  prompts=[f"Problem {n}: find x." for n in range(count)])

    problems(bench.data, args.problems)
    model = build_tiny_model(work / "model", seed=3)  # random: replies run to the token budget
    steps = [10 * (i + 1) for i in range(args.checkpoints)]
    n = args.checkpoints
    print(f"tiny random model, k={args.k}, vLLM CPU build, sandbox nodes sharing {os.cpu_count()} cores", flush=True)
    try:
        if "array" in parts:
            # --- one array ---------------------------------------------------------------------------------------
            run = exports(model, work / "array-run", steps)
            started = time.monotonic()
            array_job = bench.job_of(bench.evaluate(str(run), "--wait"))
            array_s = time.monotonic() - started

            # --- N separate submissions --------------------------------------------------------------------------
            separate = exports(model, work / "separate-run", steps)
            started = time.monotonic()
            ids = {bench.job_of(bench.evaluate("--checkpoint", str(separate / f"global_step_{step}")))
                   for step in steps}
            submitted_s = time.monotonic() - started
            bench.wait(ids)
            separate_s = time.monotonic() - started
            print(f"{args.problems} problems x k={args.k}, {args.max_tokens} tokens per response")
            print(f"{'':<44}{'one array':>14}{'separate':>14}")
            print(f"{f'{n} checkpoints: Slurm submissions':<44}{len({array_job}):>14}{len(ids):>14}")
            print(f"{f'{n} checkpoints: wall time until all ended':<44}{array_s:>13.0f}s{separate_s:>13.0f}s")
            print(f"{'  of which submitting (separate: N commands)':<44}{'-':>14}{submitted_s:>13.1f}s", flush=True)

        if "resume" in parts:
            # --- resume after a kill at 50 % ---------------------------------------------------------------------
            (work / "resume").mkdir()
            bench.data = problems(work / "resume" / "aime-bench-cleaned.parquet", args.resume_problems)
            args.max_tokens = args.resume_max_tokens
            total = args.resume_problems * args.k
            fresh = exports(model, work / "fresh-run", [1])
            started = time.monotonic()
            bench.evaluate("--checkpoint", str(fresh / "global_step_1"), "eval.chunk_problems=1", "--wait")
            fresh_s = time.monotonic() - started
            killed = exports(model, work / "killed-run", [1])
            out = killed / "beam_evals" / "global_step_1"
            job = bench.job_of(bench.evaluate("--checkpoint", str(killed / "global_step_1"), "eval.chunk_problems=1"))

            def saved() -> int:
                # One row per "\n" (a random model's replies may hold U+2028, where str.splitlines also splits).
                return sum(p.read_text().count("\n") for p in out.glob("samples/*/responses-*.jsonl"))

            deadline = time.monotonic() + 900
            while saved() < total // 2:
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job} never reached 50 % ({saved()} of {total} saved)")
                time.sleep(0.1)
            subprocess.run(["scancel", job], env=env, timeout=60, check=True)
            bench.wait({job})
            at_kill = saved()
            if at_kill >= total:
                raise SystemExit(f"the kill came after the last chunk ({at_kill} of {total} saved): raise "
                                 "--resume-max-tokens or --resume-problems")
            # squeue lists a cancelled job as COMPLETING until its processes are gone, and `evaluate` does not
            # submit a task whose job is still live: submit again once it has left.
            while "queued or running already" in (resubmitted := bench.evaluate(
                    "--checkpoint", str(killed / "global_step_1"), "eval.chunk_problems=1")):
                time.sleep(1.0)
            started = time.monotonic()
            bench.wait({bench.job_of(resubmitted)})
            resumed_s = time.monotonic() - started
            (task,) = [p for p in (out / "tasks").iterdir() if (p / "info.json").is_file()]
            progress = json.loads((task / "info.json").read_text())["progress"]
            print(f"{args.resume_problems} problems x k={args.k}, {args.resume_max_tokens} tokens per response, "
                  f"one problem per chunk; killed (scancel) with {at_kill} of {total} responses saved")
            print(f"{'':<44}{'from scratch':>14}{'resumed':>14}")
            print(f"{'responses generated':<44}{total:>14}{progress['generated']:>14}")
            print(f"{'responses reused (saved before the kill)':<44}{0:>14}{progress['reused']:>14}")
            print(f"{'reused / total':<44}{0:>14.0%}{progress['reused'] / total:>14.0%}")
            print(f"{'wall time of the evaluation job':<44}{fresh_s:>13.0f}s{resumed_s:>13.0f}s", flush=True)
    except BaseException:
        print(f"kept for a look: {work} (the task logs are under */beam_evals/.submitit/)", file=sys.stderr)
        raise
    finally:
        running = [j for j, s in bench.jobs().items() if s not in FINAL]
        if running:
            subprocess.run(["scancel", *running], env=env, capture_output=True, timeout=60)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
