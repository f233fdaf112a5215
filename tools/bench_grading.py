"""Grading throughput on 100,000 AIME-like responses with the bounded worker pool, beside in-process baselines.

Target (issue): the primary rule at >= 20,000 responses/s on this machine's cores, and no item beyond its bound.
Everything in the table is measured in this one run:

- primary rule, in-process and unbounded (the baseline: what the trainer's reward costs);
- primary rule through the worker pool (bounded in time and memory per item);
- math-verify through the pool, beside math-verify in-process with its own alarms on a sample (its usual use;
  the pool also caches each problem's parsed ground truth, part of its lead);
- the slowest single item of each pooled pass against the bound (timeout + kill grace + polling).

Usage: .venv/bin/python tools/bench_grading.py [--n 100000] [--timeout 5] [--workers 0] [--mv-baseline 3000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from beam_slurm.config.schema import GradeConfig
from beam_slurm.jobs.evaluation import grading
from beam_slurm.jobs.evaluation.grading_pool import (
    MATH_VERIFY,
    PRIMARY,
    GradingLimits,
    GradingPool,
    grade_rows_detailed,
)

FILLER = (
    "We consider the problem carefully. Let $x$ be the unknown; then $x^2 - 5x + 6 = 0$ gives $x \\in \\{2, 3\\}$. "
    "Summing over all cases and reducing modulo $1000$ we get the remainder. "
)

ADVERSARIAL = [
    "Answer: $9^{9^{9^9}}$",
    "Answer: $" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "$",
    "Answer: $10^{10^{7}}$",
    "q" * 1_000_000 + "\nAnswer: 17",
    "r" * 1_000_000,
    "Answer: $7^{7^{11}}$",
]


def make_rows(n: int, seed: int = 0) -> list[dict]:
    """n responses to AIME-like problems (k=8): half right, some wrong, some boxed only, some silent, a few hostile."""
    rng = random.Random(seed)
    rows = []
    k = 8
    for index in range(n):
        problem, sample = divmod(index, k)
        gold = (problem * 7919) % 1000
        roll = rng.random()
        reasoning = FILLER * rng.randint(1, 8)
        if roll < 0.5:
            response = f"{reasoning}\nAnswer: {gold}"
        elif roll < 0.8:
            response = f"{reasoning}\nAnswer: {rng.randrange(1000)}"
        elif roll < 0.9:
            response = f"{reasoning}\nThe answer is $\\boxed{{{gold}}}$."
        else:
            response = reasoning + " I am not sure."
        rows.append({"data_source": "bench", "problem_id": problem, "sample": sample, "response": response,
                     "ground_truth": str(gold)})
    # A few hostile responses spread through the set (same problems and samples, responses replaced).
    for position, hostile in zip(range(n // (len(ADVERSARIAL) + 1), n, n // (len(ADVERSARIAL) + 1)), ADVERSARIAL):
        rows[position]["response"] = hostile
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--timeout", type=float, help="grade.timeout_s (default: the schema's)")
    parser.add_argument("--workers", type=int, help="grade.workers (default: the schema's)")
    parser.add_argument("--mv-baseline", type=int, default=3000, help="responses for the in-process math-verify baseline")
    args = parser.parse_args(argv)

    rows = make_rows(args.n)
    recipe = GradeConfig()
    limits = GradingLimits(timeout_s=recipe.timeout_s if args.timeout is None else args.timeout,
                           memory_mb=recipe.memory_mb,
                           workers=recipe.workers if args.workers is None else args.workers)

    started = time.perf_counter()
    serial = [grading.grade_primary(r["response"], r["ground_truth"]) for r in rows]
    serial_primary_s = time.perf_counter() - started

    started = time.perf_counter()
    outcome = grade_rows_detailed(rows, limits)
    total_s = time.perf_counter() - started
    primary, verified = outcome.phases[PRIMARY], outcome.phases[MATH_VERIFY]
    assert [g["correct"] for g in outcome.grades] == [v.correct for v in serial], "pool and in-process verdicts differ"

    # math-verify as usually called: in-process, its own signal.alarm timeouts, on ordinary responses only.
    from math_verify import parse, verify

    grading.quiet_math_verify_logging()
    sample = [r for r in rows if len(r["response"]) < 5000][: args.mv_baseline]
    started = time.perf_counter()
    for row in sample:
        verify(parse(row["ground_truth"]), parse(row["response"][-grading.MATH_VERIFY_TAIL_CHARS:]))
    serial_mv_rate = len(sample) / (time.perf_counter() - started)
    # The same ordinary responses through the pool: the like-for-like ratio (the full pass above also pays for
    # the hostile items, each of which holds a worker for the whole timeout).
    with GradingPool(limits) as pool:
        _, same_sample = pool.run(MATH_VERIFY, [(r["response"][-grading.MATH_VERIFY_TAIL_CHARS:], r["ground_truth"])
                                                for r in sample])

    serial_rate = len(rows) / serial_primary_s
    bound = limits.item_bound_s
    correct = sum(1 for g in outcome.grades if g["correct"])
    print(f"{len(rows):,} responses ({correct:,} right by the primary rule), {limits.worker_count} worker(s), "
          f"per-item timeout {limits.timeout_s:g} s, bound {bound:.2f} s; pool start {outcome.pool_start_s:.2f} s, "
          f"whole grading {total_s:.1f} s")
    header = f"{'measurement':<44} {'value':>14} {'reference':>24} {'ratio':>8}"
    print(header)
    print("-" * len(header))

    def line(name: str, value: str, reference: str, ratio: float | None) -> None:
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        print(f"{name:<44} {value:>14} {reference:>24} {shown:>8}")

    line("primary rule, pool (responses/s)", f"{primary.per_second:,.0f}", "target 20,000", primary.per_second / 20_000)
    line("primary rule, pool vs in-process", f"{primary.per_second:,.0f}", f"in-process {serial_rate:,.0f}",
         primary.per_second / serial_rate)
    line("math-verify, pool, all (responses/s)", f"{verified.per_second:,.0f}", "(incl. hostile items)", None)
    line("math-verify, pool vs in-process, ordinary", f"{same_sample.per_second:,.0f}",
         f"in-process {serial_mv_rate:,.0f}", same_sample.per_second / serial_mv_rate)
    line("primary rule, slowest item (s)", f"{primary.worst_item_s:.4f}", f"bound {bound:.2f}", primary.worst_item_s / bound)
    line("math-verify, slowest item (s)", f"{verified.worst_item_s:.3f}", f"bound {bound:.2f}", verified.worst_item_s / bound)
    print(f"items over a bound (graded wrong, math_verify null): {outcome.timeouts}; workers killed: "
          f"{primary.killed_workers + verified.killed_workers}")
    ok = primary.per_second >= 20_000 and max(primary.worst_item_s, verified.worst_item_s) <= bound
    print("target met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
