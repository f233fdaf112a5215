"""Generate k responses per problem: vLLM's offline engine, or an already running OpenAI-compatible server.

Both return one row per response: ``data_source, problem_id, sample, response, ground_truth`` (what grading reads),
``finish_reason, response_tokens`` (statistics). Every setting comes from the recipe through ``from_config``. vLLM
spawns its engine process, so a script that starts an :class:`OfflineEngine` needs an ``if __name__`` guard."""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from beam_slurm.core.errors import UserError
from beam_slurm.jobs.evaluation.checkpoints import EvalInput, lora_request
from beam_slurm.jobs.evaluation.metrics import MAX_K
from beam_slurm.jobs.evaluation.problems import Problem

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from vllm import LLM

    from beam_slurm.config.schema import BeamConfig

# vllm is imported inside the functions that use it: seconds to import, and --check and --server never need it.


class SettingsError(UserError, ValueError):
    """A sampling, engine or server setting out of range; reported with exit status 2 before any model loads."""


@dataclass(frozen=True)
class SamplingSettings:
    """How responses are sampled; `from_config` reads them from the recipe (eval.*, generation.*)."""

    n: int  # k: eval.responses_per_problem
    temperature: float
    top_p: float
    max_tokens: int  # generation.max_response_tokens
    reasoning_effort: str | None  # None leaves the chat template's default
    seed: int | None = None  # per request; None on vLLM's CPU build, which rejects per-request seeds

    def __post_init__(self) -> None:
        for wrong, message in (
            (self.n < 1, f"eval.responses_per_problem must be at least 1 (got {self.n})"),
            (self.max_tokens < 1, f"generation.max_response_tokens must be at least 1 (got {self.max_tokens})"),
            (not 0.0 < self.top_p <= 1.0, f"generation.top_p must be in (0, 1] (got {self.top_p})"),
            (self.temperature < 0.0, f"generation.temperature must be >= 0 (got {self.temperature})"),
            (self.n > MAX_K, f"eval.responses_per_problem must be at most {MAX_K} (got {self.n})"),
        ):
            if wrong:
                raise SettingsError(message)

    @classmethod
    def from_config(cls, cfg: BeamConfig) -> SamplingSettings:
        """The recipe's sampling; generation.reasoning_effort=none leaves the template's default."""
        g = cfg.generation
        effort = None if str(g.reasoning_effort).lower() == "none" else g.reasoning_effort
        return cls(
            n=cfg.eval.responses_per_problem,
            temperature=g.temperature,
            top_p=g.top_p,
            max_tokens=g.max_response_tokens,
            reasoning_effort=effort,
        )

    def chat_template_kwargs(self) -> dict[str, Any]:
        return {} if self.reasoning_effort is None else {"reasoning_effort": self.reasoning_effort}


EXECUTORS = ("auto", "ray", "mp", "uni")


@dataclass(frozen=True)
class EngineSettings:
    """How the offline vLLM engine is laid out and sized; `from_config` reads it from the recipe."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    distributed_executor_backend: str | None  # "ray" across nodes, "mp" for one node, None = vLLM picks
    max_prompt_tokens: int
    dtype: str
    gpu_memory_utilization: float
    enforce_eager: bool
    max_model_len: int | None = None  # None = max_prompt_tokens + SamplingSettings.max_tokens
    seed: int = 0
    extra_engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to vllm.LLM unchanged

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1 or self.pipeline_parallel_size < 1:
            raise SettingsError("rollout.tensor_parallel and rollout.pipeline_parallel must be at least 1")
        if self.distributed_executor_backend not in (None, "ray", "mp", "uni"):
            raise SettingsError(
                f"rollout.executor_backend must be one of {', '.join(EXECUTORS)} "
                f"(got {self.distributed_executor_backend!r})"
            )
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise SettingsError(f"eval.gpu_memory_utilization must be in (0, 1] (got {self.gpu_memory_utilization})")

    @classmethod
    def from_config(cls, cfg: BeamConfig, *, ray_cluster: bool) -> EngineSettings:
        """The recipe's engine; executor `auto` is ray when TP x PP > 1 on a Ray cluster, else vLLM's choice."""
        r = cfg.rollout
        executor: str | None = r.executor_backend  # anything but auto is checked by __post_init__
        if executor == "auto":
            executor = "ray" if r.tensor_parallel * r.pipeline_parallel > 1 and ray_cluster else None
        e = cfg.eval
        return cls(
            tensor_parallel_size=r.tensor_parallel,
            pipeline_parallel_size=r.pipeline_parallel,
            distributed_executor_backend=executor,
            max_prompt_tokens=cfg.generation.max_prompt_tokens,
            dtype=e.dtype,
            gpu_memory_utilization=e.gpu_memory_utilization,
            enforce_eager=e.enforce_eager,
        )


def engine_kwargs(eval_input: EvalInput, sampling: SamplingSettings, engine: EngineSettings) -> dict[str, Any]:
    """Keyword arguments for vllm.LLM (kept separate so the layout can be checked without loading a model)."""
    executor, lora = engine.distributed_executor_backend, eval_input.lora_path is not None
    return {
        "model": str(eval_input.model_path),
        "tokenizer": str(eval_input.model_path),
        "tensor_parallel_size": engine.tensor_parallel_size,
        "pipeline_parallel_size": engine.pipeline_parallel_size,
        "max_model_len": engine.max_model_len or engine.max_prompt_tokens + sampling.max_tokens,
        "dtype": engine.dtype,
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "enforce_eager": engine.enforce_eager,
        "seed": engine.seed,
        **({"distributed_executor_backend": executor} if executor else {}),
        **({"enable_lora": True, "max_loras": 1, "max_lora_rank": eval_input.lora_rank} if lora else {}),
        **engine.extra_engine_kwargs,
    }


def _row(problem: Problem, sample: int, text: str, finish_reason: str | None, tokens: int | None) -> dict[str, Any]:
    return {
        "data_source": problem.data_source,
        "problem_id": problem.problem_id,
        "sample": sample,
        "response": text,
        "ground_truth": problem.ground_truth,
        "finish_reason": finish_reason,
        "response_tokens": tokens,
    }


Request = tuple[Problem, int, int]  # (problem, responses wanted, index of the first)


class OfflineEngine:
    """vLLM's offline engine, loaded on first use and kept for every chunk (and dataset) of one process."""

    def __init__(self, eval_input: EvalInput, sampling: SamplingSettings, engine: EngineSettings):
        self.eval_input, self.sampling, self.engine = eval_input, sampling, engine
        self._llm: LLM | None = None

    def generate(self, requests: list[Request]) -> list[dict[str, Any]]:
        """Sample each request's responses in one vLLM call; rows numbered from the request's first index."""
        from vllm import LLM, SamplingParams

        if self._llm is None:
            started = time.monotonic()
            self._llm = LLM(**engine_kwargs(self.eval_input, self.sampling, self.engine))
            logger.info(f"evaluate: engine ready in {time.monotonic() - started:.1f} s ({self.eval_input.label})")
        s = self.sampling
        params = [
            SamplingParams(n=n, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=s.seed)
            for _, n, _ in requests
        ]
        # Plain {role, content} dicts: what chat() takes, though its stubs want OpenAI's TypedDicts.
        conversations: list[Any] = [problem.messages for problem, _, _ in requests]
        outputs = self._llm.chat(
            conversations,
            params,
            use_tqdm=False,
            lora_request=lora_request(self.eval_input),
            chat_template_kwargs=s.chat_template_kwargs() or None,
        )
        return [
            _row(problem, first + offset, completion.text, completion.finish_reason, len(completion.token_ids))
            for (problem, _, first), output in zip(requests, outputs, strict=True)
            for offset, completion in enumerate(output.outputs)
        ]

    def close(self) -> None:
        """Free the accelerator memory and the engine's child process (before grading starts its workers)."""
        self._llm = None
        gc.collect()


class ServerEngine:
    """An already running OpenAI-compatible server, with the interface of OfflineEngine."""

    def __init__(self, client: ClientSettings, sampling: SamplingSettings):
        self.client, self.sampling = client, sampling

    def generate(self, requests: list[Request]) -> list[dict[str, Any]]:
        rows = []
        for n in sorted({n for _, n, _ in requests}):
            same = [(problem, first) for problem, count, first in requests if count == n]
            got = generate_with_server([p for p, _ in same], self.client, replace(self.sampling, n=n))
            first_of = {p.problem_id: first for p, first in same}
            rows += [{**row, "sample": first_of[row["problem_id"]] + row["sample"]} for row in got]
        return rows

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class ClientSettings:
    """An OpenAI-compatible server that is already running (e.g. `vllm serve` on the cluster)."""

    base_url: str  # e.g. http://node1:8000 (the /v1 suffix is optional)
    model: str | None  # as the server knows it; None = the first of GET /v1/models
    request_timeout_s: float
    max_attempts: int  # connection errors, time-outs, 429 and 5xx are retried, other errors are not
    concurrency: int
    api_key_env: str = "OPENAI_API_KEY"  # the variable's name only: the token never reaches a log or record
    backoff_s: float = 2.0  # before the 2nd try; doubles for each further try
    max_backoff_s: float = 10.0

    @classmethod
    def from_config(cls, cfg: BeamConfig, base_url: str, model: str | None) -> ClientSettings:
        e = cfg.eval
        return cls(
            base_url=base_url,
            model=model,
            request_timeout_s=e.server_request_timeout_s,
            max_attempts=e.server_max_attempts,
            concurrency=e.server_concurrency,
        )

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise SettingsError(f"--server must be an http:// or https:// URL (got {self.base_url!r})")
        if self.max_attempts < 1 or self.concurrency < 1 or self.request_timeout_s <= 0:
            raise SettingsError(
                "eval.server_max_attempts, eval.server_concurrency and eval.server_request_timeout_s must be positive"
            )

    @property
    def api_root(self) -> str:
        root = self.base_url.rstrip("/")
        return root if root.endswith("/v1") else root + "/v1"


class ServerError(RuntimeError):
    """The server refused or kept failing a request after all retries."""


_RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


def _request_json(client: ClientSettings, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
    token = os.environ.get(client.api_key_env)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    data = None if body is None else json.dumps(body).encode()
    url = client.api_root + path
    last_error = ""
    for attempt in range(1, client.max_attempts + 1):
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=client.request_timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            if exc.code not in _RETRYABLE_STATUS:
                raise ServerError(f"{method} {url}: HTTP {exc.code}: {detail}") from None
            last_error = f"HTTP {exc.code}: {detail}"
        except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as exc:
            last_error = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        if attempt < client.max_attempts:
            time.sleep(min(client.max_backoff_s, client.backoff_s * 2 ** (attempt - 1)))
    raise ServerError(f"{method} {url}: gave up after {client.max_attempts} attempts; last error: {last_error}")


def served_model(client: ClientSettings) -> str:
    """client.model, or the first model the server lists."""
    if client.model:
        return client.model
    models = _request_json(client, "GET", "/models", None).get("data") or []
    if not models:
        raise ServerError(f"GET {client.api_root}/models: the server lists no model; pass --served-model")
    return models[0]["id"]


def generate_with_server(
    problems: list[Problem], client: ClientSettings, sampling: SamplingSettings
) -> list[dict[str, Any]]:
    """Sample sampling.n responses per problem from an OpenAI-compatible chat completions endpoint."""
    model = served_model(client)
    started = time.monotonic()

    def one(problem: Problem) -> list[dict[str, Any]]:
        body: dict[str, Any] = {
            "model": model,
            "messages": problem.messages,
            "n": sampling.n,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.chat_template_kwargs():
            # vLLM's server reads this extension field; other servers ignore unknown fields.
            body["chat_template_kwargs"] = sampling.chat_template_kwargs()
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        reply = _request_json(client, "POST", "/chat/completions", body)
        choices = sorted(reply.get("choices") or [], key=lambda choice: choice.get("index", 0))
        if len(choices) != sampling.n:
            raise ServerError(
                f"{client.api_root}/chat/completions returned {len(choices)} choices for n={sampling.n} "
                f"(problem {problem.problem_id}); the server must support n > 1"
            )
        return [
            _row(problem, sample, (choice.get("message") or {}).get("content") or "", choice.get("finish_reason"), None)
            for sample, choice in enumerate(choices)
        ]

    with ThreadPoolExecutor(max_workers=client.concurrency) as pool:
        rows = [row for rows in pool.map(one, problems) for row in rows]
    logger.info(f"evaluate: {len(rows)} responses from {client.api_root} in {time.monotonic() - started:.1f} s")
    return rows


def settings_record(sampling: SamplingSettings, engine: EngineSettings | None, client: ClientSettings | None) -> dict:
    """JSON-ready record of the settings, kept with the results (no secrets: only the key's variable name)."""
    return {
        "sampling": asdict(sampling),
        "engine": asdict(engine) if engine else None,
        "server": asdict(client) if client else None,
        "python": sys.version.split()[0],
    }
