"""The whole chain on the Slurm sandbox, from one `beam-slurm submit`: the data job prepares the parquet files from
sources in the real layouts, the training job (the real `sbatch/train_lora_16gpu.sh`, rehearsal trainer on
two nodes) waits for it, gets a notice in the middle, saves, is requeued and resumes, and submits one evaluation job
(submitit's one-task array of `beam-slurm evaluate`, vLLM's CPU build) per HF export. `beam-slurm status --json` is read at each point of the
story and sacct is checked at the end.

The evaluation reads the AIME files the data stage wrote, not files written by the test, so the chain is tested
whole. That asks the model to suit those files: the tiny model of tests/evaluation is taught to reply
"Answer: 42" to the data stage's prompts (the DAPO prompt template around the test's problems, under the recipe's
reasoning effort "minimal"), and the AIME sources hold problems whose truth is 42 or 7. The grades then show right
and wrong answers for known problems, which proves the evaluation read the data stage's prompts and canonical
answers ("042" in the AIME 2025 source becomes "42"). The rehearsal's HF exports hold the base model (MODEL_PATH is
the tiny model), so vLLM loads them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS.parent / "tools",):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import evaluation_inputs  # noqa: E402  (the tiny model builder and the taught answers)
from bench_prepare_data import make_dapo  # noqa: E402  (the demonstration's DAPO-Math-17K generator)
from dapo_inputs import row, write_dapo  # noqa: E402  (the data tests' inputs in the real schemas)
from json_output_checks import assert_json_valid  # noqa: E402  (each verb's JSON against its schema)
from train_runs import INHERITED_SETTINGS, REPO_ROOT, few_gpus, wait_for  # noqa: E402

from beam_slurm.config.overrides import override  # noqa: E402
from beam_slurm.jobs.data.dapo_format import dapo_prompt  # noqa: E402

pytestmark = [pytest.mark.sandbox, pytest.mark.vllm, pytest.mark.slow]

BEAM_SLURM = REPO_ROOT / ".venv" / "bin" / "beam-slurm"
# Settings a user's shell may hold that would change the run under test; the test passes everything explicitly.
CONFIG_ENV = (*INHERITED_SETTINGS, "MODEL_PATH", "DATA_DIR", "CKPT_PATH", "EXPORT_PATH", "MAX_TRAINING_STEPS",
              "CKPT_INTERVAL", "BEAM_TRAINER_BACKEND", "XDG_STATE_HOME", "BEAM_EXPORTS_ROOT")

DAPO_ROWS, DAPO_PROMPTS = 1_791_700, 17_917
# 2.5 s steps: the notice must land before the run's end after two checkpoints were seen, though each `status`
# on a loaded machine takes seconds (with 1.5 s steps the run once ended during the notice)
STEPS, CKPT_INTERVAL, HF_INTERVAL, STEP_SECONDS = 40, 5, 20, 2.5
# Two exports, each with its evaluation job (vLLM on the lane's CPUs): every hf_save_interval, the end one of them; a
# save on notice exports nothing.
EXPORT_STEPS = [20, 40]
# The training job queues an export's evaluation once the export is 60 s unchanged (the chain's settle time), or
# at its end. With the notice sent right after step 20, the second attempt outlives that minute by ~20 s, so the
# evaluation of step 20 is queued while training runs and the last one at its end.
# (problem, truth) in file order. `--limit 2` evaluates the first two of each file: AIME 2025 has one problem the
# taught model gets right (42) and one it cannot (7), the AIME 2024 file two right ones.
AIME2025 = [("Problem A: find x.", "042"), ("Problem B: compute y.", "007"), ("Problem C: count z.", "042")]
AIME2024 = [("Problem C: count z.", "42"), ("Problem A: find x.", "42"), ("Problem B: compute y.", "7")]
# data_source -> truths of the graded problems. The AIME 2024 file in the DAPO layout keeps its own data_source,
# "math_dapo"; the converted AIME 2025 rows get data.aime2025_data_source.
EVALUATED_TRUTHS = {"aime2025": ["42", "7"], "math_dapo": ["42", "42"]}
# How status names each source's results: by the dataset the data stage wrote (AIME 2024's rows say math_dapo).
SHOWN_AS = {"aime2025": "aime2025", "math_dapo": "aime2024"}
# Whole vLLM on 2 shared CPU cores: one replica, two problems, two short answers each.
CPU_EVAL_ARGS = ["rollout.tensor_parallel=1", "rollout.pipeline_parallel=1", "eval.responses_per_problem=2",
                 "generation.max_response_tokens=16", "generation.max_prompt_tokens=256", "eval.dtype=float32",
                 "eval.gpu_memory_utilization=0.05", "eval.enforce_eager=true", "eval.limit=2", "grade.workers=1"]
LIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED"}
ENDED_BADLY = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}




def write_sources(folder: Path) -> list[str]:
    """Sources in the real layouts; returns the data.* overrides. DAPO-Math-17K at the published file's size (1.79 M
    rows of 17.9 k prompts, so the data job takes seconds, not a blink), AIME 2024 in the DAPO layout with repeated
    copies (as the DAPO repository ships it), AIME 2025 as yentinglin/aime_2025 (problem/answer strings,
    zero-padded)."""
    folder.mkdir(parents=True)
    dapo = folder / "dapo-math-17k.parquet"
    make_dapo(dapo, rows=DAPO_ROWS, prompts=DAPO_PROMPTS)
    aime2024 = write_dapo(folder / "aime-2024.parquet", [row(problem, truth, f"{copy}-{number}")
                                                        for copy in range(4)
                                                        for number, (problem, truth) in enumerate(AIME2024)])
    aime2025 = folder / "aime_2025.parquet"
    pq.write_table(pa.table({"id": list(range(len(AIME2025))), "problem": [p for p, _ in AIME2025],
                             "answer": [a for _, a in AIME2025], "year": ["2025"] * len(AIME2025)}), aime2025)
    return [f"data.dapo_math={dapo}", f"data.aime2024={aime2024}", f"data.aime2025={aime2025}"]


class Story:
    """Runs the CLI against one run and keeps every `status --json` snapshot (shown when an assertion fails)."""

    def __init__(self, sandbox, root: Path, export_path: Path):
        self.sandbox = sandbox
        self.root = root
        self.export_path = export_path
        self.started = time.monotonic()
        self.snapshots: list[tuple[float, dict[str, dict]]] = []
        self.env = {k: v for k, v in sandbox.env().items() if k not in CONFIG_ENV}
        self.env.update({
            "HOME": str(root / "home"),  # status/submit remember the last run there, not in the real home
            "PYTHONPATH": str(REPO_ROOT),  # this checkout's code, whichever one the venv's beam-slurm has installed
            "BEAM_REHEARSAL_STEP_SECONDS": str(STEP_SECONDS),
            # prepare_data.sh asks for a real cluster's 8 GB; sandbox nodes have 8000 MB. sbatch's input
            # variable overrides the #SBATCH header, as a site would do for its own small nodes.
            "SBATCH_MEM_PER_NODE": "2000M",
        })

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([str(BEAM_SLURM), *args], cwd=self.root, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def status(self) -> dict[str, dict]:
        """stage ("evaluate N" for the evaluation of step N) -> job of `beam-slurm status <export path> --json`."""
        proc = self.cli("status", str(self.export_path), "--json", timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert_json_valid("status", json.loads(proc.stdout))
        rows = {r["stage"] + (f" {r['checkpoint']}" if r["stage"] == "evaluate" else ""): r
                for r in json.loads(proc.stdout)["jobs"]}
        self.snapshots.append((time.monotonic() - self.started, rows))
        failed = [f"{r['stage']} {r['state']}" for r in rows.values() if r["state"] in ENDED_BADLY]
        assert not failed, f"{', '.join(failed)}\n{self.story()}\n{self.logs()}"
        return rows

    def status_until(self, predicate, timeout: float, what: str, interval: float = 2.0) -> dict[str, dict]:
        """Poll status until predicate(rows) holds; returns those rows. Each `status` is a CLI run (about a second
        of CPU): the story polls as often as what it must see asks, no more, beside the lanes' other runs."""
        try:
            return wait_for(lambda: (lambda rows: rows if predicate(rows) else None)(self.status()), timeout, what,
                            interval=interval)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.story()}\n{self.logs()}") from None

    def story(self, last: int = 12) -> str:
        """The latest snapshots, one line per row: what status said over time."""
        lines = []
        for at, rows in self.snapshots[-last:]:
            lines.append(f"--- {at:.0f}s")
            lines += [f"  {r['stage']:<12} {r['job_id']:<6} {r['state']:<10} restarts={r['restarts']} "
                      f"ckpt={r['checkpoint']} eval={r['evaluation']!r} reason={r['reason']!r}" for r in rows.values()]
        return "\n".join(lines)

    def logs(self, tail: int = 4000) -> str:
        text = []
        logs = self.export_path / "logs"  # the batch logs, and submitit's logs of each chained evaluation
        for path in sorted([*logs.glob("*.out"), *logs.glob("eval-step*/*.out")]):
            text.append(f"=== {path.name}\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(text)

    def mark(self, label: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {label}")

    def sacct(self, *args: str) -> list[dict[str, str]]:
        fields = ["JobID", "JobName", "State", "Submit", "Start", "End"]
        proc = subprocess.run(["sacct", "-X", "-n", "-P", "-o", ",".join(fields), *args], capture_output=True,
                              text=True, env=self.sandbox.env(), timeout=60, check=True)
        return [dict(zip(fields, line.split("|"))) for line in proc.stdout.splitlines() if line]


def checkpoint_step(row: dict) -> int | None:
    """The latest checkpoint step of a train row, None before the first."""
    assert row["checkpoint"] is None or isinstance(row["checkpoint"], int), row
    return row["checkpoint"]


def eval_rows(rows: dict[str, dict]) -> dict[int, dict]:
    return {int(stage.split()[1]): row for stage, row in rows.items() if stage.startswith("evaluate ")}


@pytest.fixture
def pipeline_root(slurm_sandbox):
    """A fresh folder on the sandbox's shared storage (nodes have a private /tmp); every job the run submitted is
    cancelled afterwards if it is still queued or running."""
    root = slurm_sandbox.new_dir("full-pipeline")
    yield root
    jobs = [str(e["job_id"]) for path in root.glob("export/beam_run/evals/*.json")
            for e in [json.loads(path.read_text())] if e.get("job_id")]
    run = root / "export" / "beam_run" / "run.json"
    if run.exists():
        jobs += [str(s["job_id"]) for sub in json.loads(run.read_text())["submissions"] for s in sub["stages"]
                 if s.get("job_id")]
    for job in jobs:
        slurm_sandbox.cancel(job)
    (root / "sources" / "dapo-math-17k.parquet").unlink(missing_ok=True)  # 320 MB


def last_logged_step(export_path: Path) -> int:
    """The highest step in the run's train_metrics.jsonl (0 before the first)."""
    path = export_path / "train_metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return max((int(json.loads(line)["step"]) for line in lines if line.strip()), default=0)


def test_submit_runs_data_train_requeue_and_one_evaluation_per_export(slurm_sandbox, pipeline_root):
    root = pipeline_root
    inputs = evaluation_inputs
    (root / "home").mkdir()
    prompts = [dapo_prompt(problem)[0]["content"] for problem, _ in AIME2025]
    inputs.build_tiny_model(root / "model", taught_answers=inputs.TAUGHT_ANSWERS, taught_prompts=prompts)
    data_overrides = write_sources(root / "sources")
    export_path = root / "export"
    run_name = f"full-{root.name.rsplit('-', 1)[1]}"
    story = Story(slurm_sandbox, root, export_path)

    # --- submit: data job, container skipped (no runtime here), training job after the data job ------------------
    submitted = story.cli(
        "submit", "recipe=lora_16gpu", "trainer.backend=rehearsal", f"run_name={run_name}",
        f"paths.model_path={root / 'model'}", f"paths.data_dir={root / 'data'}", f"paths.ckpt_path={root / 'ckpt'}",
        f"paths.export_path={export_path}", f"max_training_steps={STEPS}", f"checkpoint.interval={CKPT_INTERVAL}",
        f"checkpoint.hf_save_interval={HF_INTERVAL}", "cluster.time_limit=00:15:00", "cluster.signal_before_s=60",
        "cluster.grace_s=30", "cluster.stop_grace_s=20", "rollout.pipeline_parallel=1", "eval.chain=true",
        "eval.chain_poll_s=2", override("eval.chain_extra_args", CPU_EVAL_ARGS), *few_gpus(2), *data_overrides)
    assert submitted.returncode == 0, submitted.stderr
    ids = {parts[0]: parts[2] for parts in map(str.split, submitted.stdout.splitlines())
           if len(parts) > 2 and parts[1] == "job"}
    assert set(ids) == {"data", "train"}, submitted.stdout
    slurm_sandbox.submitted.extend(ids.values())
    data_job, train_job = ids["data"], ids["train"]
    assert f"waits for {data_job} (afterok)" in submitted.stdout
    story.mark(f"submitted data {data_job}, train {train_job}")

    # --- while the data job has not ended: training pending on its dependency ----------------------------------
    # The full-size DAPO source keeps the data job busy for a few seconds: status is read several times meanwhile.
    data_states: list[str] = []

    def data_done(rows):
        data_states.append(rows["data"]["state"])
        assert rows["container"]["state"] == "SKIPPED" and rows["container"]["reason"].startswith("not needed:")
        if rows["data"]["state"] != "COMPLETED":
            assert rows["train"]["state"] == "PENDING" and rows["train"]["restarts"] == 0, story.story()
            assert rows["train"]["reason"] == f"Dependency: waits for data job {data_job}", story.story()
            assert rows["train"]["checkpoint"] is None and not eval_rows(rows), story.story()
        return rows["data"]["state"] == "COMPLETED"

    rows = story.status()
    assert rows["data"]["state"] in ("PENDING", "RUNNING"), story.story()
    assert slurm_sandbox.scontrol_job(train_job).get("Dependency", "").startswith(f"afterok:{data_job}")
    data_done(rows)
    story.status_until(data_done, 300, "the data job to complete", interval=0.3)
    assert "RUNNING" in data_states, story.story()
    story.mark(f"data job completed (status read {len(data_states)} times meanwhile)")

    # --- training runs: checkpoints appear and grow -------------------------------------------------------------
    seen_running: list[int | None] = []

    def trained_past_first_export(rows):
        if rows["train"]["state"] == "RUNNING":
            seen_running.append(checkpoint_step(rows["train"]))
            assert rows["train"]["restarts"] == 0 and rows["train"]["nodes"], story.story()
        exported = (export_path / f"global_step_{HF_INTERVAL}").is_dir()
        # Two checkpoints seen, not one: a slow `status` on a loaded machine may first see step 20 already.
        grown = len({s for s in seen_running if s is not None}) >= 2
        return exported and grown and (checkpoint_step(rows["train"]) or 0) >= HF_INTERVAL

    rows = story.status_until(trained_past_first_export, 600, f"training to pass step {HF_INTERVAL}")
    steps_seen = [s for s in seen_running if s is not None]
    assert steps_seen == sorted(steps_seen) and len(set(steps_seen)) >= 2, story.story()
    assert all(s % CKPT_INTERVAL == 0 for s in steps_seen)
    story.mark(f"training at checkpoint {rows['train']['checkpoint']}")

    # --- a notice to the batch shell: save, requeue, resume ----------------------------------------------------
    logged_before = last_logged_step(export_path)
    subprocess.run(["scancel", "--signal=USR1", "--batch", train_job], check=True, env=slurm_sandbox.env(),
                   timeout=30)
    rows = story.status_until(lambda r: r["train"]["restarts"] == 1, 180, "the training job to be requeued")
    assert rows["train"]["state"] in LIVE_STATES, story.story()
    saved_on_notice = checkpoint_step(rows["train"])
    # The save is of the step the run was at when the notice came (bounds from the run's own log, not from how
    # fast `status` polled on a loaded machine): past what it had logged before, and no later than its last step.
    assert HF_INTERVAL <= logged_before <= saved_on_notice <= last_logged_step(export_path) < STEPS, (
        logged_before, saved_on_notice, story.story())
    story.mark(f"requeued after saving step {saved_on_notice}")

    # --- the second attempt: checkpoints grow past the notice; the first export's evaluation is queued by the
    # training job while it still runs (once the export has settled) ------------------------------------------
    resumed_steps: list[int] = []
    evaluated_while_training: set[int] = set()

    def training_ended(rows):
        train = rows["train"]
        if train["state"] == "RUNNING":
            assert train["restarts"] == 1, story.story()
            resumed_steps.append(checkpoint_step(train))
            evaluated_while_training.update(eval_rows(rows))
        return train["state"] not in LIVE_STATES

    # Checkpoints every 12.5 s over the second attempt's ~50 s: two of them are seen at one look every ~3 s.
    story.status_until(training_ended, 600, "the training job to end", interval=3.0)
    story.mark("training ended")
    assert resumed_steps and resumed_steps == sorted(resumed_steps) and resumed_steps[0] >= saved_on_notice
    assert len(set(resumed_steps)) >= 2, story.story()
    assert HF_INTERVAL in evaluated_while_training, (
        f"no evaluation of step {HF_INTERVAL} was queued while training ran\n{story.story()}")
    restarts_per_scontrol = slurm_sandbox.scontrol_job(train_job).get("Restarts")  # before MinJobAge forgets it

    # --- evaluation jobs of the later exports (the last one queued as training ends) run to the end ------------
    live_eval_seen: set[int] = set()

    def evaluations_ended(rows):
        evals = eval_rows(rows)
        live_eval_seen.update(step for step, r in evals.items() if r["state"] in LIVE_STATES)
        return len(evals) == len(EXPORT_STEPS) and all(r["state"] not in LIVE_STATES for r in evals.values())

    rows = story.status_until(evaluations_ended, 900, "every evaluation job to end", interval=5.0)
    story.mark("evaluations ended")
    assert STEPS in live_eval_seen, f"the last export's evaluation was never seen queued or running\n{story.story()}"

    # --- status at the end tells the whole story ------------------------------------------------------------------
    exports = sorted(int(p.name.removeprefix("global_step_")) for p in export_path.glob("global_step_*"))
    assert exports == EXPORT_STEPS
    assert list(rows) == ["data", "container", "train", *[f"evaluate {s}" for s in EXPORT_STEPS]], story.story()
    # In the training job, its two attempts: the first ended on the notice, the second finished.
    attempts = rows["train"]["attempts"]
    assert [a["state"] for a in attempts] == ["notice", "finished"], story.story()
    assert isinstance(attempts[0]["saved_step"], int) and attempts[0]["saved_step"] == attempts[1]["checkpoint_at_start"]
    assert attempts[1]["checkpoint_at_end"] == STEPS and attempts[0]["ended_at"] <= attempts[1]["started_at"]
    assert rows["data"]["state"] == "COMPLETED" and rows["data"]["restarts"] == 0, story.story()
    assert rows["train"]["state"] == "COMPLETED" and rows["train"]["restarts"] == 1, story.story(1)
    assert rows["train"]["checkpoint"] == rows["train"]["max_training_steps"] == STEPS
    metrics = {}
    for step in EXPORT_STEPS:
        folder = export_path / "beam_evals" / f"global_step_{step}"
        metrics[step] = json.loads((folder / "metrics.json").read_text())
        assert set(metrics[step]) == set(EVALUATED_TRUTHS) and all(m["k"] == 2 for m in metrics[step].values())
        assert {source: m["dataset"] for source, m in metrics[step].items()} == SHOWN_AS, metrics[step]
        shown = {SHOWN_AS[source]: m["avg@k"] for source, m in metrics[step].items()}
        row_of_step = rows[f"evaluate {step}"]
        assert row_of_step["state"] == "COMPLETED" and row_of_step["checkpoint"] == step, story.story(1)
        assert row_of_step["evaluation"]["accuracy"] == pytest.approx(shown), story.story(1)
        # The taught model read the data stage's prompts: it says 42, so a problem whose truth is 7 is never right
        # and one whose truth is 42 is right at least once in two samples.
        grades = [json.loads(line) for line in (folder / "grades.jsonl").read_text().splitlines() if line.strip()]
        for source, truths in EVALUATED_TRUTHS.items():
            graded = [g for g in grades if g["data_source"] == source]
            assert sorted(g["ground_truth"] for g in graded) == sorted(t for t in truths for _ in range(2)), graded
            right = {}
            for g in graded:
                right[g["problem_id"]] = right.get(g["problem_id"], 0) + int(g["correct"])
                assert g["ground_truth"] == "42" or not g["correct"], g
            assert all(right[g["problem_id"]] >= 1 for g in graded if g["ground_truth"] == "42"), graded
    latest = rows["train"]["evaluation"]
    assert latest["step"] == STEPS and latest["origin"] == "beam" and latest["accuracy"] == pytest.approx(
        {SHOWN_AS[source]: m["avg@k"] for source, m in metrics[STEPS].items()}), latest

    # --- sacct: the dependency, the requeue, one evaluation job per export --------------------------------------
    (data_record,) = story.sacct("-j", data_job)
    train_attempts = story.sacct("-D", "-j", train_job)
    assert data_record["State"] == "COMPLETED"
    assert [a["State"].split()[0] for a in train_attempts] == ["REQUEUED", "COMPLETED"], train_attempts
    assert restarts_per_scontrol == "1"
    # Queued while the data job had not ended yet, the training job started only once it had (afterok).
    first = train_attempts[0]
    assert first["Submit"] <= data_record["End"] <= first["Start"], (data_record, train_attempts)
    evaluations = story.sacct("--name", ",".join(f"{run_name}-eval-{s}" for s in EXPORT_STEPS), "-S", "now-2hours")
    assert sorted(r["JobName"] for r in evaluations) == [f"{run_name}-eval-{s}" for s in EXPORT_STEPS], evaluations
    assert {r["JobID"] for r in evaluations} == {rows[f"evaluate {s}"]["job_id"] for s in EXPORT_STEPS}
    assert all(r["State"] == "COMPLETED" for r in evaluations), evaluations
    # Each evaluation was submitted by the training job while it ran (chained per export, not by the test).
    assert all(train_attempts[0]["Start"] <= r["Submit"] <= train_attempts[-1]["End"] for r in evaluations), (
        evaluations, train_attempts)

    story.env["COLUMNS"] = "200"
    table = story.cli("status", str(export_path))
    assert table.returncode == 0 and train_job in table.stdout and "COMPLETED" in table.stdout, table.stderr
    story.mark("done")
