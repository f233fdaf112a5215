"""Metrics on hand-checked graded rows: avg@k, unbiased pass@j against the closed form and brute force, maj@k ties."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from beam_slurm.jobs.evaluation.metrics import (
    GradingInputError,
    compute_details,
    compute_metrics,
    majority_answer,
    pass_at,
)


def _grade(problem, sample, pred, gt="7", source="aime2025", mv=None, **extra):
    correct = pred is not None and pred == gt
    return {
        "data_source": source, "problem_id": problem, "sample": sample, "response": f"Answer: {pred}",
        "ground_truth": gt, "correct": correct, "pred": pred, "math_verify": correct if mv is None else mv, **extra,
    }


@pytest.mark.parametrize(
    "k,c,j,expected",
    [
        (8, 2, 1, Fraction(2, 8)),
        (8, 2, 2, 1 - Fraction(math.comb(6, 2), math.comb(8, 2))),  # 1 - 15/28 = 13/28
        (8, 2, 4, Fraction(11, 14)),  # 1 - C(6,4)/C(8,4) = 1 - 15/70
        (8, 2, 8, Fraction(1)),
        (8, 0, 4, Fraction(0)),
        (8, 8, 1, Fraction(1)),
        (4, 1, 2, Fraction(1, 2)),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    ],
)
def test_pass_at_matches_closed_form(k, c, j, expected):
    assert pass_at(k, c, j) == pytest.approx(float(expected), abs=1e-12)


def test_pass_at_matches_brute_force_over_all_subsets():
    """pass@j = share of j-subsets of the k samples that contain a correct one, for every c."""
    k = 8
    for c in range(k + 1):
        samples = [True] * c + [False] * (k - c)
        for j in (1, 2, 4, 8):
            subsets = list(itertools.combinations(range(k), j))
            brute = sum(1 for s in subsets if any(samples[i] for i in s)) / len(subsets)
            assert pass_at(k, c, j) == pytest.approx(brute, abs=1e-12), (c, j)


def test_pass_at_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at(4, 1, 8)


def test_compute_metrics_hand_checked():
    # k=4. Problem 0: 1 of 4 right; problem 1: 2 of 4 right.
    grades = [_grade(0, s, p) for s, p in enumerate(["7", "1", "2", "3"])]
    grades += [_grade(1, s, p) for s, p in enumerate(["7", "7", "5", None])]
    metrics = compute_metrics(grades)
    assert list(metrics) == ["aime2025"]
    entry = metrics["aime2025"]
    assert entry["k"] == 4
    assert entry["avg@k"] == pytest.approx((1 / 4 + 2 / 4) / 2)
    assert entry["pass@1"] == pytest.approx(entry["avg@k"])
    assert entry["pass@2"] == pytest.approx((0.5 + (1 - 1 / 6)) / 2)
    assert entry["pass@4"] == 1.0
    assert "pass@8" not in entry  # only j <= k
    # Problem 0: four different answers, one vote each -> the first sample's answer ("7") wins -> right.
    # Problem 1: "7" has two votes -> right.
    assert entry["maj@k"] == 1.0
    assert entry["timeouts"] == 0
    assert set(entry) == {"avg@k", "avg@k_ci95", "pass@1", "pass@2", "pass@4", "maj@k", "k", "timeouts"}
    # Two problems (0.25 and 0.5): every resample's mean is 0.25, 0.375 or 0.5.
    assert entry["avg@k_ci95"] == [0.25, 0.5]


def test_majority_tie_goes_to_the_answer_seen_first_in_sample_order():
    tied_wrong_first = [_grade(0, s, p) for s, p in enumerate(["5", "7", "7", "5"])]
    tied_right_first = [_grade(0, s, p) for s, p in enumerate(["7", "5", "5", "7"])]
    rng = random.Random(3)
    for rows, expected in ((tied_wrong_first, ("5", 2, False)), (tied_right_first, ("7", 2, True))):
        for _ in range(5):
            shuffled = rows[:]
            rng.shuffle(shuffled)  # the list order must not matter, only the sample numbers
            assert majority_answer(shuffled) == expected


def test_majority_ignores_silent_samples():
    assert majority_answer([_grade(0, s, p) for s, p in enumerate([None, None, None, "7"])]) == ("7", 1, True)
    assert majority_answer([_grade(0, s, None) for s in range(4)]) == (None, 0, False)


def test_maj_at_k_counts_wrong_majorities():
    grades = [_grade(0, s, p) for s, p in enumerate(["5", "5", "7", "7"])]  # tie, "5" first -> wrong
    grades += [_grade(1, s, p) for s, p in enumerate(["7", "3", "3", "3"])]  # "3" wins -> wrong
    grades += [_grade(2, s, p) for s, p in enumerate(["7", "7", "3", "7"])]  # right
    assert compute_metrics(grades)["aime2025"]["maj@k"] == pytest.approx(1 / 3)


def test_timeouts_and_sources_are_counted_separately():
    grades = [_grade(0, s, "7", source="aime2024", mv=None if s == 1 else True) for s in range(2)]
    grades[1]["math_verify"] = None
    grades += [_grade(0, s, "7", source="aime2025") for s in range(2)]
    metrics = compute_metrics(grades)
    assert metrics["aime2024"]["timeouts"] == 1 and metrics["aime2025"]["timeouts"] == 0
    assert metrics["aime2024"]["k"] == 2 and list(metrics) == ["aime2024", "aime2025"]


def test_unequal_k_is_an_error_naming_the_problem():
    grades = [_grade(p, s, "7") for p in range(3) for s in range(4)]
    grades = [g for g in grades if not (g["problem_id"] == 1 and g["sample"] == 3)]
    with pytest.raises(GradingInputError, match=r"problem '1' has 3 samples but most problems have 4"):
        compute_metrics(grades)


def test_details_per_problem_lengths_and_finish_reasons():
    grades = [
        _grade(0, 0, "7", finish_reason="stop", response_tokens=10),
        _grade(0, 1, "7", mv=False, finish_reason="stop", response_tokens=20),
        _grade(1, 0, None, gt="3", finish_reason="length", response_tokens=30),
        _grade(1, 1, "3", gt="3", finish_reason="stop", response_tokens=40),
    ]
    details = compute_details(grades)["aime2025"]
    assert details["finish_reasons"] == {"length": 1, "stop": 3}
    assert details["response_tokens"]["mean"] == 25 and details["response_tokens"]["max"] == 40
    assert details["no_answer"] == 1
    assert details["math_verify_avg@k"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert details["agreement"] == pytest.approx(3 / 4)
    first, second = details["problems"]
    assert (first["problem_id"], first["correct"], first["majority"], first["majority_correct"]) == (0, 2, "7", True)
    assert (second["correct"], second["no_answer"], second["majority"]) == (1, 1, "3")


@pytest.mark.parametrize("k,levels", [(1, [1]), (4, [1, 2, 4]), (12, [1, 2, 4, 8, 12]), (64, [1, 2, 4, 8, 16, 32, 64])])
def test_pass_at_levels_are_powers_of_two_up_to_k(k, levels):
    from beam_slurm.jobs.evaluation.metrics import pass_at_levels

    assert pass_at_levels(k) == levels


def test_pass_at_k_up_to_64_equals_a_brute_force_count():
    """metrics.json's pass@j for k = 16 equals, per problem, the share of j-subsets holding a correct sample
    (counted over every subset for small j, over the complement's subsets for large j)."""
    k, rng = 16, random.Random(7)
    grades = []
    for problem in range(5):
        correct = rng.randrange(k + 1)
        flags = [True] * correct + [False] * (k - correct)
        rng.shuffle(flags)
        grades += [_grade(f"p{problem}", s, "7" if ok else "8") for s, ok in enumerate(flags)]
    metrics = compute_metrics(grades)["aime2025"]
    assert [key for key in metrics if key.startswith("pass@")] == ["pass@1", "pass@2", "pass@4", "pass@8", "pass@16"]
    for j in (1, 2, 4, 8, 16):
        per_problem = []
        for problem in range(5):
            flags = [g["correct"] for g in grades if g["problem_id"] == f"p{problem}"]
            subsets = list(itertools.combinations(range(k), j))
            per_problem.append(sum(any(flags[i] for i in s) for s in subsets) / len(subsets))
        assert metrics[f"pass@{j}"] == pytest.approx(sum(per_problem) / 5, abs=1e-12), j


def test_avg_at_k_interval_equals_a_direct_bootstrap_with_the_same_seed():
    import numpy as np

    from beam_slurm.jobs.evaluation.metrics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED

    k, rng = 8, random.Random(3)
    grades, shares = [], []
    for problem in range(30):
        correct = rng.randrange(k + 1)
        shares.append(correct / k)
        grades += [_grade(str(problem), s, "7" if s < correct else "9") for s in range(k)]
    low, high = compute_metrics(grades)["aime2025"]["avg@k_ci95"]
    # Directly: resample the 30 problems with replacement 10,000 times from the same seeded generator, take the
    # means' 2.5th and 97.5th percentiles (the percentile method, inverted-CDF quantiles).
    generator = random.Random(BOOTSTRAP_SEED)
    means = [sum(generator.choice(shares) for _ in range(30)) / 30 for _ in range(BOOTSTRAP_DRAWS)]
    expected = np.percentile(means, [2.5, 97.5], method="inverted_cdf")
    assert (low, high) == pytest.approx(tuple(expected), abs=1e-12)
    assert low < sum(shares) / 30 < high
