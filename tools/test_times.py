#!/usr/bin/env python3
"""Where the test suite's time went, from the JUnit XML files of tools/run_tests.sh's groups.

    tools/test_times.py [--groups groups.tsv] [--install-s S] [--total-s S] [--slowest 15] [--record PATH] XML...

Prints each group's wall time, the slowest tests (setup, call and teardown together, as JUnit XML counts them; the
lane a sandbox test ran in), and each sandbox test over the per-scenario budget of its lane. `--record PATH` writes
the lane tests' times as JSON (test id -> seconds), which tests/conftest.py reads to start the longest tests first.
Standard library only.
"""
from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO_BUDGET_S = 240
"""The most a sandbox scenario may take of its lane."""


def test_id(classname: str, name: str) -> str:
    """pytest's node id from JUnit's classname ("tests.training.test_x.TestY") and name."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (ROOT / path).is_file():
            return "::".join([path, *parts[cut:], name])
    return f"{classname}::{name}"


def read_cases(path: Path) -> list[dict]:
    """One dict per test case of a JUnit XML file: id, seconds, outcome, lane (or None)."""
    cases = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        lane = next((p.get("value") for p in case.iter("property") if p.get("name") == "lane"), None)
        cases.append({"id": test_id(case.get("classname", ""), case.get("name", "")),
                      "seconds": float(case.get("time") or 0), "outcome": outcome, "lane": lane})
    return cases


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xml", nargs="*", type=Path, help="one JUnit XML file per group, named <group>.xml")
    parser.add_argument("--groups", type=Path, help="TSV of group, wall seconds, exit status")
    parser.add_argument("--install-s", type=float)
    parser.add_argument("--total-s", type=float)
    parser.add_argument("--slowest", type=int, default=15)
    parser.add_argument("--record", type=Path, help="write the lane tests' times here (JSON)")
    args = parser.parse_args(argv)

    print("================ run_tests: where the time went ================")
    if args.install_s is not None:
        print(f"install: {minutes(args.install_s)}")
    if args.groups and args.groups.exists():
        for line in args.groups.read_text().splitlines():
            name, wall, rc, *version = line.split("\t")
            on = f" on Slurm {version[0]}" if version and name != "other" else ""
            print(f"group {name}{on}: {minutes(float(wall))} wall, exit {rc}")
    if args.total_s is not None:
        print(f"whole command: {minutes(args.total_s)}")

    cases = []
    for path in args.xml:
        if path.exists() and path.stat().st_size:
            cases += [dict(case, group=path.stem) for case in read_cases(path)]
    if not cases:
        print("no test results")
        return 0
    print(f"the {min(args.slowest, len(cases))} slowest tests:")
    for case in sorted(cases, key=lambda c: -c["seconds"])[:args.slowest]:
        where = case["group"] + (f" lane {case['lane']}" if case["lane"] else "")
        print(f"  {case['seconds']:7.1f} s  {where:<13} {case['outcome']:<8} {case['id']}")
    over = [c for c in cases if c["group"] in ("lanes", "whole", "semantics") and c["seconds"] > SCENARIO_BUDGET_S]
    for case in over:
        print(f"  over the {SCENARIO_BUDGET_S} s budget of a sandbox scenario: {case['id']} ({case['seconds']:.0f} s)")
    if args.record:
        times = {c["id"]: round(c["seconds"], 1) for c in cases if c["group"] == "lanes" and c["outcome"] != "skipped"}
        args.record.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")
        print(f"lane test times written to {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
