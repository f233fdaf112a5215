"""Grading: the training reward's rule on hand-checked cases, conformance with skyrl-gym's scorer, and the bounded
worker pool on adversarial answers (real worker processes, real math-verify)."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import tempfile
import threading
import time

import pytest

from beam_slurm.config.schema import GradeConfig
from beam_slurm.jobs.evaluation import grading
from beam_slurm.jobs.evaluation.grading_pool import MATH_VERIFY, GradingLimits, GradingPool, grade_rows_detailed
from beam_slurm.jobs.evaluation.metrics import GradingInputError, compute_metrics

# (response, ground truth, expected correct, expected pred), each checked by hand against the rule's steps.
PRIMARY_CASES = [
    ("Let me think.\nAnswer: 42", "42", True, "42"),
    ("answer : 42", "42", True, "42"),  # case-insensitive, spaces around the colon
    ("Answer: $42$", "42", True, "42"),
    ("Answer: \\boxed{42}", "42", True, "42"),
    ("Answer: $\\text{42}$", "42", True, "42"),
    ("\\boxed{42}", "42", False, None),  # no Answer: line -> wrong, even with the right box
    ("Answer: 41\nwait, no.\nAnswer: 42", "42", True, "42"),  # the last match counts
    ("Answer: 42\nwait, no.\nAnswer: 41", "42", False, "41"),
    ("Answer: 1,000", "1000", True, "1000"),  # thousands separators dropped for plain numbers
    ("Answer: x = 42", "42", True, "42"),  # text after the last '=' only
    ("Answer: 42 degrees", "42", True, "42"),  # spaces removed, then the unit
    ("Answer: 42</think> trailing", "42", True, "42"),  # '<' ends the capture
    ("Answer: \\frac12", "\\frac{1}{2}", True, "\\frac{1}{2}"),  # TeX shorthand expanded
    ("Answer: 25", "025", False, "25"),  # string compare: zero-padded gold never matches
    ("Answer: 42\n" + "x" * 400, "42", False, None),  # the answer is outside the last 300 characters
    ("The answer is 42.", "42", False, None),
]


@pytest.mark.parametrize("response,ground_truth,correct,pred", PRIMARY_CASES)
def test_primary_rule_hand_checked(response, ground_truth, correct, pred):
    verdict = grading.grade_primary(response, ground_truth)
    assert (verdict.correct, verdict.pred) == (correct, pred)


def recipe_limits(**changes) -> GradingLimits:
    """The recipe's grading limits (the schema's grade section), with some changed for the test."""
    settings = {key: value for key, value in changes.items() if key in ("timeout_s", "memory_mb", "workers")}
    limits = GradingLimits.from_settings(dataclasses.replace(GradeConfig(), **settings))
    return dataclasses.replace(limits, **{key: value for key, value in changes.items() if key not in settings})



def test_zero_padded_ground_truths_are_flagged():
    assert grading.zero_padded_ground_truths(["025", "25", "0", "007", "x"]) == ["007", "025"]


def _conformance_corpus() -> list[tuple[str, str]]:
    cases = [(r, gt) for r, gt, _, _ in PRIMARY_CASES]
    pieces = ["Answer:", "answer :", "ANSWER:", " ", "\n", "$", "42", "1,234", "=", "\\boxed{", "}", "\\text{", "\\frac",
              "12", "\\sqrt", "3", "degrees", "an ", "a ", "<", "\\!", "^\\circ", "\\$", "mbox{", "\\overline{", "{,}",
              "\\textbf{", ".", "units", "\\;"]
    rng = random.Random(1234)
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
        gt = rng.choice(["42", "1234", "\\frac{1}{2}", "3", "12", "\\sqrt{3}", "025"])
        cases.append((text, gt))
    return cases


@pytest.mark.skyrl
def test_primary_rule_matches_skyrl_gym_scorer():
    """Our re-implementation against skyrl-gym's own AIME scorer (the training reward), run in the SkyRL venv."""
    from skyrl_venv import run_in_skyrl_venv

    cases = _conformance_corpus()
    code = (
        "import json, sys\n"
        "from skyrl_gym.envs.aime.utils import compute_score\n"
        "cases = json.load(open(sys.argv[1]))\n"
        "print(json.dumps({'v': [[s['acc'], s['pred']] for s in (compute_score(r, gt) for r, gt in cases)]}))\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(cases, handle)
    try:
        reference = run_in_skyrl_venv(code, handle.name)["v"]
    finally:
        os.unlink(handle.name)
    mismatches = []
    for (response, gt), (ref_correct, ref_pred) in zip(cases, reference):
        ours = grading.grade_primary(response, gt)
        # The reference reports a missing Answer: line as the normalised string "[INVALID]"; we report None.
        ours_pred = "[INVALID]" if ours.pred is None else ours.pred
        if (ours.correct, ours_pred) != (bool(ref_correct), ref_pred):
            mismatches.append((response, gt, ours, ref_correct, ref_pred))
    assert not mismatches, mismatches[:5]
    assert sum(1 for c, _ in reference if c) >= 5  # the corpus exercises both verdicts


def _rows(responses: list[str], ground_truth: str = "42") -> list[dict]:
    return [
        {"data_source": "adversarial", "problem_id": i, "sample": 0, "response": r, "ground_truth": ground_truth}
        for i, r in enumerate(responses)
    ]


def test_adversarial_answers_finish_within_their_bound():
    limits = recipe_limits(timeout_s=1.0, kill_grace_s=0.5)
    nested = "\\frac{1}{" * 200 + "2" + "}" * 200
    responses = [
        "Answer: $9^{9^{9^9}}$",  # exponent tower: sympy would run for minutes
        "Answer: $" + nested + "$",  # deeply nested fraction, longer than the rule's 300-character window
        "So the result is " + nested + " which is $" + nested + "$",  # nested fraction, no answer line
        "y" * 1_000_000 + "\nAnswer: 42",  # megabyte-long response, right answer at the end
        "z" * 1_000_000,  # megabyte-long response, no answer line
        "I could not solve it.",
        "Answer: 42",
    ]
    started = time.monotonic()
    outcome = grade_rows_detailed(_rows(responses), limits)
    elapsed = time.monotonic() - started
    grades = outcome.grades
    assert [g["correct"] for g in grades] == [False, False, False, True, False, False, True]
    assert grades[0]["pred"] == "9^{9^{9^9}}"
    assert grades[3]["pred"] == "42" and grades[4]["pred"] is None and grades[5]["pred"] is None
    assert grades[0]["math_verify"] is None  # the tower hit its bound: null, counted
    assert grades[6]["math_verify"] is True and grades[3]["math_verify"] is True
    for phase in outcome.phases.values():
        assert phase.worst_item_s <= limits.item_bound_s
    assert outcome.timeouts == sum(1 for g in grades if g["math_verify"] is None) >= 1
    assert compute_metrics(grades)["adversarial"]["timeouts"] == outcome.timeouts
    # Never longer than every item hitting its bound one after the other, plus pool start.
    # (the margin covers process start-up on a loaded machine; a tower left unbounded would take hours)
    assert elapsed < outcome.pool_start_s + outcome.timeouts * limits.item_bound_s + 30


def test_stuck_worker_is_killed_and_its_batch_finished_by_a_new_one():
    """A worker that cannot honour its alarm (stopped here with SIGSTOP) is killed at timeout + grace."""
    limits = recipe_limits(timeout_s=0.5, kill_grace_s=0.5, workers=1)
    items = [("Answer: $7^{7^{11}}$", "42"), ("Answer: 42", "42"), ("Answer: 41", "42")]
    with GradingPool(limits) as pool:
        pid = pool._workers[0].process.pid

        def stop_worker_mid_item():
            time.sleep(0.2)
            os.kill(pid, signal.SIGSTOP)

        stopper = threading.Thread(target=stop_worker_mid_item)
        stopper.start()
        started = time.monotonic()
        values, stats = pool.run(MATH_VERIFY, items)
        elapsed = time.monotonic() - started
        stopper.join()
        assert values == [None, True, False]
        assert stats.killed_workers == 1 and stats.timeouts == 1
        assert limits.timeout_s + limits.kill_grace_s <= stats.worst_item_s <= limits.item_bound_s
        assert elapsed < limits.item_bound_s + 30  # a stopped worker never killed would hang the run
        assert pool._workers[0].process.pid != pid


def test_workers_run_under_the_memory_cap():
    with GradingPool(recipe_limits(memory_mb=700, workers=1)) as pool:
        pid = pool._workers[0].process.pid
        deadline = time.monotonic() + 10
        line = ""
        while time.monotonic() < deadline:
            with open(f"/proc/{pid}/limits") as handle:
                line = next(l for l in handle if l.startswith("Max address space"))
            if str(700 * 1024 * 1024) in line:
                break
            time.sleep(0.05)  # the worker sets its cap right after it starts
        assert str(700 * 1024 * 1024) in line
        values, _ = pool.run(MATH_VERIFY, [("Answer: 42", "42")])
        assert values == [True]


def test_grade_rows_keeps_input_fields_and_order():
    rows = _rows(["Answer: 42", "Answer: 7", "nothing"])
    for row in rows:
        row["finish_reason"] = "stop"
    grades = grade_rows_detailed(rows, recipe_limits(timeout_s=2.0)).grades
    assert [g["problem_id"] for g in grades] == [0, 1, 2]
    assert all(g["finish_reason"] == "stop" for g in grades)
    assert [(g["correct"], g["pred"], g["math_verify"]) for g in grades] == [
        (True, "42", True), (False, "7", False), (False, None, False)
    ]


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda rows: rows[1].pop("response"), "row 2: missing field(s) response"),
        (lambda rows: rows[0].update(sample=True), "'sample' must be an integer"),
        (lambda rows: rows[2].update(sample=0, problem_id=0), "duplicate sample 0 of problem '0'"),
        (lambda rows: rows[1].update(ground_truth="41", problem_id=0, sample=5), "two ground truths"),
    ],
)
def test_bad_rows_are_rejected_before_any_worker_starts(mutate, message):
    rows = _rows(["Answer: 42", "Answer: 1", "Answer: 2"])
    mutate(rows)
    with pytest.raises(GradingInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        grade_rows_detailed(rows, recipe_limits())


def test_unequal_k_names_the_problem():
    rows = [
        {"data_source": "aime2025", "problem_id": p, "sample": s, "response": "Answer: 1", "ground_truth": "1"}
        for p in range(3)
        for s in range(8 if p != 2 else 7)
    ]
    with pytest.raises(GradingInputError, match=r"problem '2' has 7 samples but most problems have 8"):
        grade_rows_detailed(rows, recipe_limits())


def test_bad_limits_are_rejected():
    with pytest.raises(GradingInputError, match="timeout must be > 0"):
        recipe_limits(timeout_s=0)
