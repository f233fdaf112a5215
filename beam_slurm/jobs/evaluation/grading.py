"""Grading one AIME response: the training reward's rule, and HF math-verify as a second opinion.

The primary rule (the verdict every metric uses) has the semantics of the reward the policy is trained on, skyrl-gym's
AIME scorer (itself verl's ``math_dapo`` rule), re-implemented so grading needs no SkyRL install: a response is right
when the last match of ``(?i)Answer\\s*:\\s*([^\\n<]+)`` in its last 300 characters (none: wrong, ``pred`` is None)
equals the ground truth, both normalised by :func:`normalize_final_answer`. A bare ``\\boxed{42}`` without an
``Answer:`` line is wrong, and a zero-padded ground truth ("025") never matches "25" (:func:`zero_padded_ground_truths`
lets callers warn). Math-verify runs on the response's tail; it can take minutes on ``9^{9^{9^9}}`` and its alarms work
only on a main thread, so :func:`math_verify_item` runs inside :mod:`beam_slurm.jobs.evaluation.grading_pool`'s workers,
which bound every item."""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass

# math_verify is imported inside the functions that use it: it brings sympy (a second) and only the workers need it.

PRIMARY_TAIL_CHARS = 300  # the reward's; also bounds the rule's cost on megabyte-long responses
MATH_VERIFY_TAIL_CHARS = 4000  # the answer sits at the end: the rest costs regex time and pipe traffic for nothing

_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n<]+)")

# Textual substitutions, applied in this order (the order matters: "an " is removed before spaces are).
_SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)

# Units, filler words and TeX spacing dropped from answers, in this order.
_REMOVED: tuple[str, ...] = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)

# With two or more "$" on a line, only the text between the first two survives.
_FIRST_DOLLAR_PAIR = re.compile(r".*?\$(.*?)\$.*")
_UNWRAP_LAZY = tuple(re.compile(rf"\\{name}\{{(.*?)\}}") for name in ("text", "textbf", "overline"))
_UNWRAP_BOXED = re.compile(r"\\boxed\{(.*)\}")
_SHORT_FRAC = re.compile(r"frac([^{])(.)")
_SHORT_SQRT = re.compile(r"sqrt([^{])")


def normalize_final_answer(answer: str) -> str:
    """Normalise an answer string the way the training reward does (same steps, same order)."""
    text = answer.rpartition("=")[2]
    for old, new in (*_SUBSTITUTIONS, *((token, "") for token in _REMOVED)):
        text = text.replace(old, new)
    text = _FIRST_DOLLAR_PAIR.sub(r"$\1$", text)
    for pattern in _UNWRAP_LAZY:
        text = pattern.sub(r"\1", text)
    text = _UNWRAP_BOXED.sub(r"\1", text)
    # TeX shorthand: \frac12 -> \frac{1}{2}, \sqrt2 -> \sqrt{2}.
    text = _SHORT_FRAC.sub(r"frac{\1}{\2}", text)
    text = _SHORT_SQRT.sub(r"sqrt{\1}", text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


@functools.lru_cache(maxsize=4096)
def _normalized_ground_truth(ground_truth: str) -> str:
    # Every problem's ground truth is graded k times; normalise it once.
    return normalize_final_answer(ground_truth)


def extract_answer(response: str) -> str | None:
    """The normalised last ``Answer:`` value in the response's last 300 characters, or None if there is none."""
    answers = _ANSWER_LINE.findall(response[-PRIMARY_TAIL_CHARS:])
    return normalize_final_answer(answers[-1]) if answers else None


@dataclass(frozen=True)
class PrimaryVerdict:
    """The training reward's verdict on one response."""

    correct: bool
    pred: str | None  # the extracted, normalised answer; None without an ``Answer:`` line in the tail


def grade_primary(response: str, ground_truth: str) -> PrimaryVerdict:
    """Grade one response with the training reward's rule (cheap: it reads at most 300 characters)."""
    pred = extract_answer(response)
    return PrimaryVerdict(correct=pred is not None and pred == _normalized_ground_truth(ground_truth), pred=pred)


def zero_padded_ground_truths(ground_truths: list[str]) -> list[str]:
    """Ground truths such as "025" that the string comparison can never match against an unpadded answer."""
    return sorted({gt for gt in ground_truths if len(gt.strip()) > 1 and gt.strip().isdigit() and gt.strip()[0] == "0"})


@functools.lru_cache(maxsize=4096)
def _parsed_ground_truth(ground_truth: str):
    from math_verify import parse

    return parse(ground_truth, parsing_timeout=None)


def math_verify_item(response: str, ground_truth: str) -> bool:
    """math-verify's verdict on one response (its own alarms off: call it inside a bounded worker process)."""
    from math_verify import parse, verify

    gold = _parsed_ground_truth(ground_truth)
    return bool(verify(gold, parse(response[-MATH_VERIFY_TAIL_CHARS:], parsing_timeout=None), timeout_seconds=None))


def quiet_math_verify_logging() -> None:
    """Silence math-verify's once-per-process warning that its alarms are off (the worker pool bounds each call)."""
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)
