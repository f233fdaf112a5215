"""`beam-slurm grade --responses FILE.jsonl --out DIR`: grade pre-generated responses with the evaluation's code.

Input: one JSON object per line with "data_source", "problem_id", "sample", "response", "ground_truth" (other
fields are carried through). Output: the files of :mod:`beam_slurm.jobs.evaluation.results`; nothing on bad input.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from rich.table import Table

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, keys_under, table_console
from beam_slurm.core.errors import ConfigError
from beam_slurm.core.json_text import json_text
from beam_slurm.jobs.evaluation import grading
from beam_slurm.jobs.evaluation.grading_pool import GradingLimits, GradingSetupError, grade_rows_detailed
from beam_slurm.jobs.evaluation.metrics import (
    PASS_AT,
    GradeDetails,
    GradeMetrics,
    GradingInputError,
    compute_details,
    compute_metrics,
)
from beam_slurm.jobs.evaluation.results import METRICS_FILE, write_results


class GradeJson(TypedDict):
    """`grade --json`: the metrics written to metrics.json and the details written to details.json, per data
    source."""

    metrics: dict[str, GradeMetrics]  # data source -> its metrics
    details: dict[str, GradeDetails]  # data source -> math-verify's view, lengths, finish reasons, each problem
    out: str  # the folder the files were written to (--out)


JSON_OUTPUT = GradeJson


def build_parser():
    verb = VerbArgs(
        "grade", __doc__.split("\n\n")[0], keys=keys_under("grade"), inputs="--responses FILE.jsonl --out DIR"
    )
    verb.add_argument("--responses", required=True, type=Path, help="JSONL file of responses to grade")
    verb.add_argument("--out", required=True, type=Path, help="output folder for metrics.json, grades.jsonl, ...")
    verb.add_argument("--force", action="store_true", help="replace the results already in --out")
    verb.add_argument("--json", action="store_true", help="print the metrics as JSON instead of a table")
    return verb


def read_responses(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; raises GradingInputError naming the file and line of any unreadable row."""
    if not path.is_file():
        raise GradingInputError(f"--responses {path}: no such file")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise GradingInputError(f"{path}:{number}: not valid JSON ({error.msg})") from None
    return rows


def print_summary(
    metrics: Mapping[str, Mapping[str, Any]], details: Mapping[str, Mapping[str, Any]], file=None
) -> None:
    """A table of the metrics per data source, with math-verify's view beside the primary rule's."""
    table = Table(title="AIME grading (primary rule = training reward; math-verify as second opinion)")
    for column in (
        "data source",
        "k",
        "avg@k",
        *(f"pass@{j}" for j in PASS_AT),
        "maj@k",
        "math-verify avg@k",
        "agree",
        "no answer",
        "timeouts",
    ):
        table.add_column(column, justify="left" if column == "data source" else "right")
    for source, entry in metrics.items():
        extra = details.get(source, {})
        agreement = extra.get("agreement")
        table.add_row(
            source,
            str(entry["k"]),
            f"{entry['avg@k']:.4f}",
            *(f"{entry[f'pass@{j}']:.4f}" if f"pass@{j}" in entry else "-" for j in PASS_AT),
            f"{entry['maj@k']:.4f}",
            f"{extra['math_verify_avg@k']:.4f}" if "math_verify_avg@k" in extra else "-",
            f"{agreement:.3f}" if agreement is not None else "-",
            str(extra.get("no_answer", "-")),
            str(entry["timeouts"]),
        )
    table_console(file).print(table)


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        parsed = verb.parse(argv)
        args = parsed.args
        cfg = verb.load(parsed)
        if (args.out / METRICS_FILE).exists() and not args.force:
            raise GradingInputError(
                f"{args.out} already holds results ({METRICS_FILE}); "
                "pass --force to replace them or choose another --out"
            )
        limits = GradingLimits.from_settings(cfg.grade)
        rows = read_responses(args.responses)
        padded = grading.zero_padded_ground_truths(
            [str(r.get("ground_truth", "")) for r in rows if isinstance(r, dict)]
        )
        outcome = grade_rows_detailed(rows, limits)
    except (ConfigError, VerbUsageError, GradingInputError, GradingSetupError) as error:
        return verb.report(error)
    if padded:
        print(
            f"{verb.prefix}warning: zero-padded ground truth(s) {', '.join(padded[:5])}: the training reward "
            "compares strings, so '025' never matches '25'; write integer answers unpadded",
            file=sys.stderr,
        )
    metrics = compute_metrics(outcome.grades)
    details = compute_details(outcome.grades)
    write_results(args.out, outcome.grades, metrics)
    if args.json:
        output: GradeJson = {"metrics": metrics, "details": details, "out": str(args.out)}
        print(json_text(output))
        return 0
    print_summary(metrics, details)
    primary, verified = outcome.phases["primary"], outcome.phases["math_verify"]
    print(
        f"graded {len(outcome.grades)} responses with {limits.worker_count} worker(s): primary rule "
        f"{primary.per_second:,.0f}/s, math-verify {verified.per_second:,.0f}/s, slowest item "
        f"{max(primary.worst_item_s, verified.worst_item_s):.2f} s (bound {limits.item_bound_s:.2f} s), "
        f"{outcome.timeouts} over a bound; results in {args.out}"
    )
    return 0
