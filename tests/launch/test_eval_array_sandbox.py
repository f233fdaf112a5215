"""`beam-slurm evaluate` as submitit job arrays on the Slurm sandbox, with vLLM's CPU build on a tiny model.

One set of exports and one tiny model serve every test: a run with two exports is evaluated as one array (and
not submitted again once finished), `-m` expands two k values into task keys, and a task on the preemptable `low`
partition loses its node to a `high` job in the middle of generation, is requeued through submitit's checkpoint
protocol and finishes with the responses it had saved.

The model is untaught and random (sampling at temperature 1 from a 512-token vocabulary rarely ends a reply
early), so a long token budget makes generation take long enough to be interrupted half-way.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aime_files import write_aime_parquet
from tiny_model import build_tiny_model

REPO_ROOT = Path(__file__).resolve().parents[2]
BEAM_SLURM = [sys.executable, "-m", "beam_slurm.cli"]

# One lane runs the three in order: they share the module's exports (tests/conftest.py, SHARED_FIXTURE_FILES).
pytestmark = [pytest.mark.sandbox, pytest.mark.vllm, pytest.mark.slow]

# The tiny model on vLLM's CPU build: one process (TP1 x PP1), float32, a small KV cache, no graph capture; exports
# count as complete at once (nothing writes them any more).
CPU_ENGINE = ["rollout.tensor_parallel=1", "rollout.pipeline_parallel=1", "eval.dtype=float32",
              "eval.gpu_memory_utilization=0.05", "eval.enforce_eager=true", "generation.max_prompt_tokens=256",
              "grade.workers=1", "eval.chain_settle_s=0"]
RUN_STEPS = [5, 10]  # two exports, two array tasks (each a vLLM engine on the lane's CPUs)
PROBLEMS = 3
LONG_PROBLEMS = 60
"""The preempted task's problems: on a quiet machine 20 were all generated in the seconds the preemption takes to
arrive (the task then finished before it was requeued); 60 keep it busy well past that."""


class Exports:
    """The shared inputs: a run folder with HF exports of the tiny model, single checkpoints, the AIME file."""

    def __init__(self, sandbox, root: Path):
        self.sandbox = sandbox
        self.root = root
        self.name = f"arr-{uuid.uuid4().hex[:6]}"  # the arrays' job name (eval.launcher.name), to count them
        model = build_tiny_model(root / "model", seed=3)
        self.run = root / "run"
        for step in RUN_STEPS:
            shutil.copytree(model, self.run / f"global_step_{step}" / "policy")
        for name in ("ksweep", "preempt"):
            shutil.copytree(model, root / name / "global_step_1" / "policy")
        self.data = write_aime_parquet(root / "aime-tiny-cleaned.parquet")
        # Problems for the preemption: enough that the task is still generating when the preemption reaches it.
        (root / "long").mkdir()
        self.long_data = write_aime_parquet(root / "long" / "aime-tiny-cleaned.parquet",
                                            ground_truths=[str(n) for n in range(LONG_PROBLEMS)],
                                            prompts=[f"Problem {n}: find x." for n in range(LONG_PROBLEMS)])

    def evaluate(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([*BEAM_SLURM, "evaluate", *args, *CPU_ENGINE, f"eval.launcher.name={self.name}"],
                              capture_output=True, text=True, timeout=timeout, cwd=self.root,
                              env={**self.sandbox.env(), "VLLM_LOGGING_LEVEL": "WARNING", "COLUMNS": "200"})

    def jobs(self) -> list[dict[str, str]]:
        """sacct rows (allocations) of every array these tests submitted."""
        fields = ["JobID", "JobName", "State", "Partition", "NodeList"]
        proc = subprocess.run(["sacct", "-X", "-n", "-P", "-o", ",".join(fields), "--name", self.name,
                               "-S", "now-2hours"], capture_output=True, text=True, env=self.sandbox.env(),
                              timeout=60, check=True)
        return [dict(zip(fields, line.split("|"))) for line in proc.stdout.splitlines() if line]

    def logs(self) -> str:
        return "\n".join(f"=== {p}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.root.rglob(".submitit/*/*.out")))


@pytest.fixture(scope="module")
def exports(slurm_sandbox) -> Exports:
    found = Exports(slurm_sandbox, slurm_sandbox.new_dir("eval-array"))
    yield found
    for row in found.jobs():
        slurm_sandbox.cancel(row["JobID"])


def read_rows(path: Path) -> list[dict]:
    """JSON lines split at "\n" only (a random model's replies may hold U+2028, which str.splitlines splits at)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def task_folder(out: Path, k: int) -> Path:
    (folder,) = [p for p in (out / "tasks").iterdir() if p.name.startswith(f"aime_tiny-k{k}-")]
    return folder


def test_a_runs_exports_are_one_array_and_finished_tasks_are_not_resubmitted(exports):
    started = time.monotonic()
    first = exports.evaluate(str(exports.run), "--data", str(exports.data), "eval.responses_per_problem=2",
                             "generation.max_response_tokens=8", "--wait")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:] + exports.logs()
    print(f"{len(RUN_STEPS)} exports as one array: {time.monotonic() - started:.0f} s")
    rows = exports.jobs()
    arrays = {row["JobID"].split("_")[0] for row in rows}
    assert len(arrays) == 1, rows
    array = arrays.pop()
    assert sorted(row["JobID"] for row in rows) == [f"{array}_{i}" for i in range(len(RUN_STEPS))], rows
    assert all(row["State"] == "COMPLETED" for row in rows), rows
    for step in RUN_STEPS:
        out = exports.run / "beam_evals" / f"global_step_{step}"
        metrics = json.loads((out / "metrics.json").read_text())["aime_tiny"]
        grades = read_rows(out / "grades.jsonl")
        assert metrics["k"] == 2 and len(grades) == PROBLEMS * 2
        assert metrics["avg@k"] == pytest.approx(sum(g["correct"] for g in grades) / len(grades))
        assert len(metrics["avg@k_ci95"]) == 2
        info = json.loads((out / "info.json").read_text())
        assert info["global_step"] == step and info["slurm_job_id"] in {row["JobID"] for row in rows}
    assert "global_step_10" in first.stdout and "avg@k" in first.stdout  # the merged table

    # The same submission again: every task key is finished, nothing goes to Slurm.
    again = exports.evaluate(str(exports.run), "--data", str(exports.data), "eval.responses_per_problem=2",
                             "generation.max_response_tokens=8", timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("finished already, not submitted") == len(RUN_STEPS), again.stdout
    assert "nothing to submit" in again.stdout
    assert len(exports.jobs()) == len(rows)


def test_multirun_over_two_k_values_makes_both_task_keys_from_one_generation(exports):
    checkpoint = exports.root / "ksweep" / "global_step_1"
    before = {row["JobID"] for row in exports.jobs()}
    result = exports.evaluate("-m", "--checkpoint", str(checkpoint), "--data", str(exports.data),
                              "eval.responses_per_problem=1,3", "generation.max_response_tokens=8", "--wait")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + exports.logs()
    new = [row for row in exports.jobs() if row["JobID"] not in before]
    # Same checkpoint, dataset and sampling: one task generates 3 responses per problem and writes both keys.
    assert len(new) == 1 and new[0]["State"] == "COMPLETED", new
    out = checkpoint.parent / "beam_evals" / "global_step_1"
    for k in (1, 3):
        folder = task_folder(out, k)
        metrics = json.loads((folder / "metrics.json").read_text())["aime_tiny"]
        assert metrics["k"] == k
        assert len(read_rows(folder / "grades.jsonl")) == PROBLEMS * k
    info = json.loads((task_folder(out, 3) / "info.json").read_text())
    assert info["progress"]["generated"] == PROBLEMS * 3 and info["progress"]["reused"] == 0
    assert json.loads((out / "metrics.json").read_text())["aime_tiny"]["k"] == 3  # the view: the largest k
    shown = [line for line in result.stdout.splitlines() if "aime_tiny" in line]
    assert len(shown) == 2, result.stdout


def reused_before(chunks: dict[str, str]) -> int:
    return sum(text.count("\n") for text in chunks.values())  # one row per "\n" (responses may hold U+2028)


def saved_chunks(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in out.glob("samples/*/responses-*.jsonl")}


def test_a_preempted_task_resumes_with_the_responses_it_had(exports):
    sandbox = exports.sandbox
    checkpoint = exports.root / "preempt" / "global_step_1"
    out = checkpoint.parent / "beam_evals" / "global_step_1"
    k, max_tokens = 4, 192
    total = LONG_PROBLEMS * k
    # All 8 GPUs of a node on the preemptable partition, so a high job that needs that node's GPUs preempts it.
    submitted = exports.evaluate("--checkpoint", str(checkpoint), "--data", str(exports.long_data),
                                 f"eval.responses_per_problem={k}", f"generation.max_response_tokens={max_tokens}",
                                 "eval.chunk_problems=1", f"eval.launcher.partition={sandbox.partition('low')}",
                                 "eval.launcher.gpus_per_node=8", timeout=180)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    job = re.search(r"-> job array (\d+)", submitted.stdout).group(1)  # one task: a plain job
    sandbox.submitted.append(job)

    deadline = time.monotonic() + 420
    while len(saved_chunks(out)) < 2:
        assert time.monotonic() < deadline, f"no chunk saved\n{sandbox.scontrol_job(job)}\n{exports.logs()}"
        time.sleep(0.2)
    node = sandbox.scontrol_job(job)["NodeList"]
    high = sandbox.sbatch(f"#!/bin/bash\n#SBATCH --partition={sandbox.partition('high')} --nodes=1 --nodelist={node} --gres=gpu:8 "
                          f"--mem=100 --time=2 --output={exports.root}/high-%j.out\nsleep 3\n")
    assert sandbox.wait(high, 180) == "COMPLETED"
    # The high job ran only once the task had left the node; the requeued attempt starts after it (Slurm holds a
    # requeued job a few seconds), so this is what the first attempt saved.
    before = saved_chunks(out)
    state = sandbox.wait(job, 600)
    assert state == "COMPLETED", exports.logs()

    attempts = subprocess.run(["sacct", "-X", "-D", "-n", "-P", "-o", "JobID,State", "-j", job],
                              capture_output=True, text=True, env=sandbox.env(), timeout=60, check=True).stdout
    states = [line.split("|")[1].split()[0] for line in attempts.splitlines() if line]
    assert states[0] in ("PREEMPTED", "REQUEUED") and states[-1] == "COMPLETED", attempts
    log = "".join(p.read_text(errors="replace") for p in out.parent.glob(f".submitit/{job}/*_log.out"))
    # submitit's handler caught the notice in the task (not killed with its engine) and the task came back: requeued
    # by submitit's own `scontrol requeue`, or by the preemption itself (PreemptMode=REQUEUE) when the preemption's
    # SIGTERM reached that scontrol first (seen under load: it waited 3 s on the controller and died).
    assert "Caught signal SIGUSR2" in log, log[-4000:]
    assert f"Requeued job {job}" in log or states[0] == "PREEMPTED", (attempts, log[-4000:])
    assert "attempt 1" in log and f"({reused_before(before)} reused)" in log, log[-4000:]
    # Every chunk saved before the preemption is still there, unchanged; the requeued attempt generated the rest.
    after = saved_chunks(out)
    assert all(after.get(name) == text for name, text in before.items())
    task = task_folder(out, k)
    progress = json.loads((task / "info.json").read_text())["progress"]
    reused = reused_before(before)
    assert 0 < reused < total
    assert progress["reused"] >= reused and progress["reused"] + progress["generated"] == total, progress
    grades = read_rows(out / "grades.jsonl")
    assert sorted((g["problem_id"], g["sample"]) for g in grades) == sorted(
        (f"p{n}", s) for n in range(LONG_PROBLEMS) for s in range(k))
    print(f"preempted after {reused} of {total} responses; the requeued attempt reused {progress['reused']}")
