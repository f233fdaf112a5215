"""Metrics over graded responses: avg@k, unbiased pass@j, maj@k, per-problem table, lengths, finish reasons.

Every problem of a data source must have the same number k of samples; c of its k samples are correct. avg@k is the mean
of c / k (equals unbiased pass@1); pass@j the mean of 1 - C(k - c, j) / C(k, j) (Chen et al. 2021); maj@k votes on the
primary rule's extracted answers (no answer, no vote), a tie going to the answer first in sample order, so the result is
deterministic; avg@k_ci95 resamples problems (AIME's unit of variation) with a fixed seed. "timeouts" counts responses
whose grading hit its time or memory bound (``math_verify`` is null)."""

from __future__ import annotations

import collections
import math
import random
import statistics
from collections.abc import Iterable
from typing import Any, NotRequired, TypedDict, cast

from beam_slurm.core.errors import UserError

PASS_AT = (1, 2, 4, 8, 16, 32, 64)  # the pass@j columns tables show
MAX_K = 64  # eval.responses_per_problem is checked against it
BOOTSTRAP_DRAWS = 10_000
BOOTSTRAP_SEED = 20250101  # fixed: the same grades always give the same interval


class GradingInputError(UserError, ValueError):
    """Rows that cannot be graded or scored; the message names the row or problem and the fix."""


# One data source's metrics, as metrics.json holds them. With pass@j for j = 1, 2, 4, ... up to k, and k itself: keys
# that depend on k, which a TypedDict cannot name (the JSON Schema gives them as a pattern).
GradeMetrics = TypedDict(  # the functional form: the keys hold `@`
    "GradeMetrics",
    {
        "avg@k": float,  # the mean over problems of c / k (c of the k samples correct): unbiased pass@1
        "avg@k_ci95": list[float],  # avg@k's 95 % interval: [low, high], resampling problems with a fixed seed
        "maj@k": float,  # the share of problems whose majority answer (first in sample order on a tie) is right
        "k": int,  # samples per problem
        "timeouts": int,  # responses whose math-verify grading hit its time or memory bound
        "dataset": NotRequired[str],  # in an evaluation's metrics.json: the dataset it evaluated (aime2024)
    },
)


class LengthStats(TypedDict):
    """Response lengths over every response of a data source."""

    mean: float
    median: float
    p90: float
    min: float
    max: float


class ProblemRow(TypedDict):
    """One problem: its k samples graded."""

    problem_id: str | int  # as the input gave it
    ground_truth: str | int  # as the input gave it
    k: int
    correct: int  # samples right by the primary rule (the training reward)
    math_verify_correct: int  # samples right by math-verify
    majority: str | None  # the majority answer, null when no sample gave one
    majority_votes: int
    majority_correct: bool
    no_answer: int  # samples with no answer extracted
    mean_chars: float  # mean response length in characters


# One data source's details: math-verify's view, the response lengths, the finish reasons (details.json).
SourceSummary = TypedDict(  # the functional form: a key holds `@`
    "SourceSummary",
    {
        "problems_count": int,
        "responses": int,
        "math_verify_avg@k": float,  # avg@k by math-verify's judgement instead of the primary rule's
        "agreement": float | None,  # share of responses where both rules agree; null when math-verify judged none
        "no_answer": int,  # responses with no answer extracted
        "finish_reasons": dict[str, int],  # vLLM's finish reason (`stop`, `length`; `unknown`) -> responses
        "response_chars": LengthStats,
        "response_tokens": NotRequired[LengthStats],  # only when every response says its token count
    },
)


class GradeDetails(SourceSummary):
    """One data source's details and its per-problem table."""

    problems: list[ProblemRow]


def _problem_sort_key(problem_id: Any) -> tuple:
    text = str(problem_id)
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def validate_rows(rows: list[dict[str, Any]]) -> None:
    """Raise :class:`GradingInputError` unless every row is gradable and every problem has the same k."""
    if not rows:
        raise GradingInputError("no responses to grade: the input has no rows")
    required = ("data_source", "problem_id", "sample", "response", "ground_truth")
    seen: set[tuple[str, str, int]] = set()
    truths: dict[tuple[str, str], str] = {}
    samples: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise GradingInputError(f"row {number}: expected a JSON object, got {type(row).__name__}")
        missing = [name for name in required if name not in row]
        if missing:
            raise GradingInputError(
                f"row {number}: missing field(s) {', '.join(missing)}; each row needs {', '.join(required)}"
            )
        if not isinstance(row["response"], str):
            raise GradingInputError(f"row {number}: 'response' must be a string, got {type(row['response']).__name__}")
        if not isinstance(row["data_source"], str) or not row["data_source"]:
            raise GradingInputError(f"row {number}: 'data_source' must be a non-empty string")
        for name in ("ground_truth", "problem_id"):
            if isinstance(row[name], bool) or not isinstance(row[name], (str, int)):
                raise GradingInputError(f"row {number}: {name!r} must be a string or an integer, got {row[name]!r}")
        if isinstance(row["sample"], bool) or not isinstance(row["sample"], int) or row["sample"] < 0:
            raise GradingInputError(f"row {number}: 'sample' must be an integer >= 0, got {row['sample']!r}")
        source, problem = row["data_source"], str(row["problem_id"])
        key = (source, problem, row["sample"])
        if key in seen:
            raise GradingInputError(
                f"row {number}: duplicate sample {row['sample']} of problem {problem!r} in data source {source!r}"
            )
        seen.add(key)
        truth = str(row["ground_truth"])
        previous = truths.setdefault((source, problem), truth)
        if previous != truth:
            raise GradingInputError(
                f"row {number}: problem {problem!r} of data source {source!r} has two ground "
                f"truths, {previous!r} and {truth!r}"
            )
        samples[source][problem] += 1
    for source, per_problem in samples.items():
        counts = collections.Counter(per_problem.values())
        if len(counts) > 1:
            k = counts.most_common(1)[0][0]
            odd = sorted((p for p, n in per_problem.items() if n != k), key=_problem_sort_key)
            raise GradingInputError(
                f"data source {source!r}: problem {odd[0]!r} has {per_problem[odd[0]]} samples "
                f"but most problems have {k} (k must be equal for every problem; {len(odd)} "
                "problem(s) differ)"
            )


def pass_at(k: int, correct: int, j: int) -> float:
    """Unbiased probability that at least one of j samples drawn from k (``correct`` of them right) is right."""
    if not 0 <= correct <= k or not 1 <= j <= k:
        raise ValueError(f"pass_at needs 0 <= correct <= k and 1 <= j <= k, got k={k} correct={correct} j={j}")
    return 1.0 if k - correct < j else 1.0 - math.comb(k - correct, j) / math.comb(k, j)


def pass_at_levels(k: int) -> list[int]:
    """j for the pass@j entries of a k-sample evaluation: 1, 2, 4, ... up to k, and k itself."""
    levels = [1 << i for i in range(k.bit_length()) if 1 << i <= k]
    return levels + ([k] if levels[-1] != k else [])


def bootstrap_interval(
    per_problem: list[float], *, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `per_problem` (each problem's c/k)."""
    n = len(per_problem)
    if n == 0:
        raise ValueError("bootstrap_interval needs at least one problem")
    generator = random.Random(seed)
    means = sorted(sum(per_problem[generator.randrange(n)] for _ in range(n)) / n for _ in range(draws))
    tail = (1.0 - level) / 2.0
    return means[max(0, math.ceil(tail * draws) - 1)], means[min(draws - 1, math.ceil((1.0 - tail) * draws) - 1)]


def majority_answer(samples: list[dict[str, Any]]) -> tuple[str | None, int, bool]:
    """(answer, votes, correct) of the majority vote over one problem's graded samples (tie: first in sample order)."""
    ordered = sorted(samples, key=lambda g: g["sample"])
    votes = collections.Counter(g["pred"] for g in ordered if g["pred"] is not None)  # answers in order first seen
    if not votes:
        return None, 0, False
    winner, top = max(votes.items(), key=lambda item: item[1])  # the first of equal counts
    return winner, top, next(bool(g["correct"]) for g in ordered if g["pred"] == winner)


def _by_problem(grades: Iterable[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for grade in grades:
        grouped[grade["data_source"]][str(grade["problem_id"])].append(grade)
    return grouped


def compute_metrics(grades: list[dict[str, Any]]) -> dict[str, GradeMetrics]:
    """``{data_source: {"avg@k", "avg@k_ci95", "pass@1".., "maj@k", "k", "timeouts"}}`` from graded rows."""
    validate_rows(grades)
    metrics: dict[str, GradeMetrics] = {}
    for source, problems in sorted(_by_problem(grades).items()):
        k = len(next(iter(problems.values())))
        n_correct = [sum(1 for g in samples if g["correct"]) for samples in problems.values()]
        # Cast: the pass@j keys depend on k (GradeMetrics says so; tests/verbs/test_json_schemas.py checks the output).
        metrics[source] = cast(
            GradeMetrics,
            {
                "avg@k": statistics.fmean(c / k for c in n_correct),
                "avg@k_ci95": list(bootstrap_interval([c / k for c in n_correct])),
                **{f"pass@{j}": statistics.fmean(pass_at(k, c, j) for c in n_correct) for j in pass_at_levels(k)},
                "maj@k": statistics.fmean(1.0 if majority_answer(s)[2] else 0.0 for s in problems.values()),
                "k": k,
                "timeouts": sum(1 for samples in problems.values() for g in samples if g["math_verify"] is None),
            },
        )
    return metrics


def _length_stats(values: list[int]) -> LengthStats:
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(ordered),
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)],
        "min": ordered[0],
        "max": ordered[-1],
    }


def compute_details(grades: list[dict[str, Any]]) -> dict[str, GradeDetails]:
    """Per data source: math-verify's view, response lengths, finish reasons and the per-problem table."""
    details: dict[str, GradeDetails] = {}
    for source, problems in sorted(_by_problem(grades).items()):
        rows = [g for samples in problems.values() for g in samples]
        k = len(next(iter(problems.values())))
        judged = [g for g in rows if g["math_verify"] is not None]
        table: list[ProblemRow] = []
        for problem_id in sorted(problems, key=_problem_sort_key):
            samples = problems[problem_id]
            answer, votes, majority_correct = majority_answer(samples)
            table.append(
                {
                    "problem_id": samples[0]["problem_id"],
                    "ground_truth": samples[0]["ground_truth"],
                    "k": k,
                    "correct": sum(1 for g in samples if g["correct"]),
                    "math_verify_correct": sum(1 for g in samples if g["math_verify"]),
                    "majority": answer,
                    "majority_votes": votes,
                    "majority_correct": majority_correct,
                    "no_answer": sum(1 for g in samples if g["pred"] is None),
                    "mean_chars": statistics.fmean(len(g["response"]) for g in samples),
                }
            )
        entry: SourceSummary = {
            "problems_count": len(problems),
            "responses": len(rows),
            "math_verify_avg@k": statistics.fmean(p["math_verify_correct"] / k for p in table),
            "agreement": sum(1 for g in judged if bool(g["math_verify"]) == bool(g["correct"])) / len(judged)
            if judged
            else None,
            "no_answer": sum(p["no_answer"] for p in table),
            "finish_reasons": dict(
                sorted(collections.Counter(str(g.get("finish_reason") or "unknown") for g in rows).items())
            ),
            "response_chars": _length_stats([len(g["response"]) for g in rows]),
        }
        tokens = [g["response_tokens"] for g in rows if isinstance(g.get("response_tokens"), int)]
        if len(tokens) == len(rows):
            entry["response_tokens"] = _length_stats(tokens)
        details[source] = {**entry, "problems": table}
    return details
