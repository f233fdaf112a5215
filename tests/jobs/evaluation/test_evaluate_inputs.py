"""`beam-slurm evaluate` input checks, checkpoint resolution and the server client's retry rules (no model load).

The HTTP server in the client tests is a test double: a scripted stdlib server that fails on purpose, because
a real vLLM server cannot be made to answer 503 or 400 on demand. The real server path is in
test_generate_vllm.py.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from aime_files import write_aime_parquet

from beam_slurm.config.schema import BeamConfig
from beam_slurm.jobs.evaluation.checkpoints import CheckpointError, resolve_checkpoint
from beam_slurm.jobs.evaluation.generate import ClientSettings, SamplingSettings, ServerError, generate_with_server
from beam_slurm.jobs.evaluation.problems import DatasetError, Problem, read_problems


def fake_model_dir(path: Path, shards: list[str] | None = None) -> Path:
    """Files of a Hugging Face model directory (contents irrelevant: nothing here loads them)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if shards:
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {f"w{i}": s for i, s in
                                                                                      enumerate(shards)}}))
        (path / shards[0]).write_bytes(b"")
    else:
        (path / "model.safetensors").write_bytes(b"")
    return path


def fake_adapter_dir(path: Path, base: str | None = "/nonexistent/base") -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": 16, "base_model_name_or_path": base}))
    (path / "adapter_model.safetensors").write_bytes(b"")
    return path


def test_export_layouts_resolve_to_the_policy_dir_and_default_out(tmp_path):
    policy = fake_model_dir(tmp_path / "exports" / "run" / "global_step_20" / "policy")
    for given in (policy.parent, policy):
        resolved = resolve_checkpoint(given)
        assert resolved.model_path == policy and resolved.global_step == 20 and resolved.lora_path is None
        assert resolved.default_out_dir() == tmp_path / "exports" / "run" / "beam_evals" / "global_step_20"
    base = resolve_checkpoint(fake_model_dir(tmp_path / "base-model"))
    assert base.global_step is None and base.default_out_dir() is None


def test_lora_adapter_needs_a_local_base_model(tmp_path):
    base = fake_model_dir(tmp_path / "base")
    adapter = fake_adapter_dir(tmp_path / "ckpt" / "global_step_10" / "policy")
    with pytest.raises(CheckpointError, match="--base-model"):
        resolve_checkpoint(adapter)
    resolved = resolve_checkpoint(adapter.parent, base)
    assert (resolved.model_path, resolved.lora_path) == (base, adapter)
    assert (resolved.lora_rank, resolved.global_step) == (16, 10)
    # The adapter's recorded base is used when it is a local directory.
    recorded = fake_adapter_dir(tmp_path / "adapter2", base=str(base))
    assert resolve_checkpoint(recorded).model_path == base
    with pytest.raises(CheckpointError, match="only for LoRA"):
        resolve_checkpoint(base, base)


def test_incomplete_exports_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="missing weight shard"):
        resolve_checkpoint(fake_model_dir(tmp_path / "a", shards=["m-1.safetensors", "m-2.safetensors"]))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="no weights"):
        resolve_checkpoint(tmp_path / "b")
    with pytest.raises(CheckpointError, match="not a directory"):
        resolve_checkpoint(tmp_path / "missing")


def test_parquet_checks_name_the_file_and_column(tmp_path):
    good = write_aime_parquet(tmp_path / "good.parquet")
    problems = read_problems(good)
    assert [p.problem_id for p in problems] == ["p0", "p1", "p2"]
    assert problems[0].messages == [{"role": "user", "content": "Problem A: find x."}]
    assert [p.ground_truth for p in read_problems(good, limit=2)] == ["42", "42"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    no_truth = pa.table({"prompt": [[{"role": "user", "content": "x"}]], "data_source": ["a"]})
    pq.write_table(no_truth, tmp_path / "bad.parquet")
    with pytest.raises(DatasetError, match="bad.parquet lacks column.*reward_model"):
        read_problems(tmp_path / "bad.parquet")
    (tmp_path / "text.parquet").write_text("not parquet")
    with pytest.raises(DatasetError, match="not a readable parquet"):
        read_problems(tmp_path / "text.parquet")


def run_cli_without_model(args: list[str]) -> subprocess.CompletedProcess:
    """Run `evaluate` and also report whether vLLM got imported (it must not be, for bad input)."""
    code = (
        "import sys; from beam_slurm.verbs.evaluate import main; rc = main(sys.argv[1:]); "
        "print('VLLM_IMPORTED' if 'vllm' in sys.modules else 'NO_VLLM'); sys.exit(rc)"
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing_checkpoint", "--checkpoint"),
        ("lora_without_base", "--base-model"),
        ("missing_data", "does not exist"),
        ("no_out_for_base_model", "--out is required"),
        ("bad_k", "eval.responses_per_problem must be at least 1"),
        ("bad_k_old_flag", "--k is an old spelling, not accepted; use eval.responses_per_problem=0"),
        ("unknown_key", "beam-slurm evaluate: invalid configuration (1 problem)"),
        ("bad_type", "eval.limit"),
        ("no_data_no_data_dir", "--data FILE.parquet is required, or paths.data_dir"),
        ("bad_grading", "grading memory cap must be >= 256 MiB"),
        ("bad_server_url", "--server must be an http"),
        ("same_source_twice", "both hold data_source"),
    ],
)
def test_bad_input_exits_2_before_loading_a_model(tmp_path, case, expected):
    data = str(write_aime_parquet(tmp_path / "aime.parquet"))
    export = fake_model_dir(tmp_path / "exports" / "global_step_5" / "policy").parent
    args = {
        "missing_checkpoint": ["--checkpoint", str(tmp_path / "nope"), "--data", data],
        "lora_without_base": ["--checkpoint", str(fake_adapter_dir(tmp_path / "adapter")), "--data", data],
        "missing_data": ["--checkpoint", str(export), "--data", str(tmp_path / "none.parquet")],
        "no_out_for_base_model": ["--checkpoint", str(fake_model_dir(tmp_path / "base")), "--data", data],
        "bad_k": ["--checkpoint", str(export), "--data", data, "eval.responses_per_problem=0"],
        "bad_k_old_flag": ["--checkpoint", str(export), "--data", data, "--k", "0"],
        "unknown_key": ["--checkpoint", str(export), "--data", data, "eval.responses=8"],
        "bad_type": ["--checkpoint", str(export), "--data", data, "eval.limit=some"],
        "no_data_no_data_dir": ["--checkpoint", str(export), "paths.data_dir=null"],
        "bad_grading": ["--checkpoint", str(export), "--data", data, "grade.memory_mb=100"],
        "bad_server_url": ["--server", "node1:8000", "--data", data, "--out", str(tmp_path / "o")],
        "same_source_twice": ["--checkpoint", str(export), "--data", data, "--data",
                              str(write_aime_parquet(tmp_path / "copy.parquet"))],
    }[case]
    result = run_cli_without_model(args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in result.stderr
    assert result.stderr.splitlines()[-1].startswith(("beam-slurm evaluate: ", "  - "))
    assert "NO_VLLM" in result.stdout
    assert not (tmp_path / "exports" / "beam_evals").exists()


class ScriptedServer(http.server.ThreadingHTTPServer):
    """Test double for an OpenAI-compatible server: answers POSTs from a script of (status, body) pairs."""

    def __init__(self, script: list[tuple[int, dict]]):
        self.script = list(script)
        self.requests: list[dict] = []
        super().__init__(("127.0.0.1", 0), ScriptedHandler)


class ScriptedHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        status, reply = self.server.script.pop(0) if self.server.script else (500, {"error": "script exhausted"})
        payload = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def completion(n: int, text: str) -> dict:
    return {"choices": [{"index": i, "message": {"content": text}, "finish_reason": "stop"} for i in range(n)]}


@pytest.fixture
def scripted_server():
    servers = []

    def start(script):
        server = ScriptedServer(script)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def client_for(server, **overrides) -> ClientSettings:
    settings = dict(base_url=f"http://127.0.0.1:{server.server_address[1]}", model="m", backoff_s=0.01,
                    max_attempts=3, concurrency=1, request_timeout_s=10)
    return ClientSettings(**{**settings, **overrides})


PROBLEM = Problem("aime", "p0", [{"role": "user", "content": "q"}], "42")


def sampling(**changes) -> SamplingSettings:
    """The schema's sampling settings with `changes`."""
    return dataclasses.replace(SamplingSettings.from_config(BeamConfig()), **changes)


def test_client_retries_server_errors_then_succeeds(scripted_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "secret-token")
    server = scripted_server([(503, {"error": "loading"}), (429, {"error": "busy"}),
                              (200, completion(2, "Answer: 42"))])
    rows = generate_with_server([PROBLEM], client_for(server), sampling(n=2, max_tokens=32))
    assert [(r["sample"], r["response"], r["finish_reason"]) for r in rows] == [(0, "Answer: 42", "stop"),
                                                                                 (1, "Answer: 42", "stop")]
    assert len(server.requests) == 3
    sent = server.requests[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer secret-token"
    assert sent["body"]["n"] == 2 and sent["body"]["max_tokens"] == 32 and sent["body"]["top_p"] == 1.0
    assert sent["body"]["chat_template_kwargs"] == {"reasoning_effort": "minimal"}


def test_client_gives_up_after_bounded_attempts_and_never_retries_a_bad_request(scripted_server):
    server = scripted_server([(503, {})] * 5)
    with pytest.raises(ServerError, match="gave up after 3 attempts"):
        generate_with_server([PROBLEM], client_for(server), sampling(n=1))
    assert len(server.requests) == 3
    server = scripted_server([(400, {"error": "bad max_tokens"}), (200, completion(1, "x"))])
    with pytest.raises(ServerError, match="HTTP 400"):
        generate_with_server([PROBLEM], client_for(server), sampling(n=1))
    assert len(server.requests) == 1
    server = scripted_server([(200, completion(1, "only one"))])
    with pytest.raises(ServerError, match="n > 1"):
        generate_with_server([PROBLEM], client_for(server), sampling(n=2))
