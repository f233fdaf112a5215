"""`beam-slurm doctor`: what this cluster's Slurm configuration means for a run of the recipe, one row per thing the
toolkit relies on (verdict, meaning, fix) for the partition the recipe uses; `--probe` measures too, `--write NAME`
keeps what was found as a site profile (`cluster=NAME`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TypedDict

from rich.markup import escape

from beam_slurm.config import profiles
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, fit_columns, keys_under, table_console, verb_table
from beam_slurm.core.errors import ConfigError
from beam_slurm.core.json_text import json_text
from beam_slurm.launch import site_probe
from beam_slurm.policy import doctor
from beam_slurm.policy.doctor import Check
from beam_slurm.slurm import site
from beam_slurm.slurm.scheduler import SlurmCommandError, SlurmUnreachable

SECTIONS_READ = ("cluster", "paths", "checkpoint", "lora", "trainer", "container", "eval.launcher", "site")
COLOURS = {"ok": "green", "degraded": "yellow", "broken": "bold red"}


class CheckJson(TypedDict):
    """One thing the toolkit relies on, for the partition the recipe uses."""

    name: str  # the setting in snake case: `kill_wait`, `min_job_age`, `preempt_notice`, `requeue_hold`, ...
    value: str  # the setting in Slurm's own words (or the file it comes from)
    verdict: doctor.Verdict
    meaning: str  # what the value means for a run of the recipe
    fix: str  # what to change; empty when nothing needs to


class DoctorJson(TypedDict):
    """`doctor --json`: what the cluster's Slurm settings mean for a run of the recipe; exit 1 when a check is
    broken."""

    slurm_version: str
    partition: str  # the partition the checks are for: the recipe's, else Slurm's default
    checks: list[CheckJson]
    profile_written: str | None  # the site profile `--write NAME` wrote, or null
    unanswered: list[str]  # the Slurm daemons that did not answer (`slurmdbd`: the QOS checks say what they lack)


JSON_OUTPUT = DoctorJson


def build_parser() -> VerbArgs:
    verb = VerbArgs(
        "doctor",
        "What the cluster's Slurm settings mean for a run of the recipe: per setting a verdict (ok, degraded,\n"
        "broken) and the fix; exit 1 when one is broken.",
        keys=["recipe", "max_training_steps", *keys_under(*SECTIONS_READ)],
    )
    verb.add_argument("--probe", action="store_true", help="also measure with small jobs on the partition")
    verb.add_argument("--json", action="store_true", help="print the checks as JSON")
    verb.add_argument("--write", metavar="NAME", help="keep what was found as site profile NAME (cluster=NAME)")
    verb.add_argument("--force", action="store_true", help="with --write: replace profile NAME")
    return verb


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        parsed = verb.parse(argv)
        args = parsed.args
        if args.force and not args.write:
            raise VerbUsageError("--force replaces the profile --write NAME writes; give --write NAME")
    except VerbUsageError as exc:
        return verb.fail(exc)
    try:
        cfg = verb.load(parsed)
        if args.write:
            profiles.writable_path(args.write, force=args.force)  # refused before Slurm is asked
        facts = site.read(cfg.cluster.partition, [p for p in (cfg.paths.ckpt_path, cfg.paths.export_path) if p])
    except ConfigError as exc:
        return verb.config_failed(exc)
    except SlurmUnreachable as exc:  # an outage: which daemon, Slurm's words, what to do
        return verb.fail(exc, 1)
    except SlurmCommandError as exc:
        return verb.fail(f"Slurm could not be asked: {exc}", 1)
    rows = doctor.checks(facts, cfg)
    measured_at = datetime.now().astimezone().isoformat(timespec="seconds")
    values: dict[str, object] = doctor.profile_values(facts, measured_at)
    if args.probe:
        findings = site_probe.probe(cfg, say=lambda line: verb.fail(line, 0))
        rows += [as_check(row) for row in findings.checks(cfg)]
        values.update(findings.profile_values(cfg))
    written = None
    if args.write:
        header = (
            f"Written by `beam-slurm doctor{' --probe' if args.probe else ''} --write {args.write}` on "
            f"{measured_at}: partition {facts.partition_name}, Slurm {facts.version}.\n"
            f"Use it with cluster={args.write} (or BEAM_SLURM_CLUSTER={args.write})."
        )
        try:
            written = profiles.write_profile(args.write, values, force=args.force, header=header)
        except ConfigError as exc:
            return verb.config_failed(exc)
    if args.json:
        print(json_text(doctor_json(facts, rows, written)))
    else:
        print_table(facts, cfg, rows)
        if written is not None:
            print(f"{verb.prefix}site profile written: {written} (use it with cluster={args.write})")
    for _ in facts.unanswered:  # the accounting daemon: the QOS rows say what they lack
        verb.fail(f"{facts.qos_unread}; the rows that need the QOS say so")
    return max(doctor.exit_status(rows), 1 if facts.unanswered else 0)


def as_check(row: Check | Mapping[str, object]) -> Check:
    """A probe's row (name, value, verdict, meaning, fix) as a Check."""
    if isinstance(row, Check):
        return row
    text = {name: str(row.get(name) or "") for name in ("name", "value", "verdict", "meaning", "fix")}
    verdicts: dict[str, doctor.Verdict] = {v: v for v in doctor.VERDICTS}
    return Check(text["name"], text["value"], verdicts[text["verdict"]], text["meaning"], text["fix"])


def doctor_json(facts: site.SiteFacts, rows: list[Check], written: object) -> DoctorJson:
    """`doctor --json`: the version, the partition, every check; the profile written (or null); daemons unanswered."""
    return {
        "slurm_version": facts.version,
        "partition": facts.partition_name,
        "checks": [
            {"name": row.name, "value": row.value, "verdict": row.verdict, "meaning": row.meaning, "fix": row.fix}
            for row in rows
        ],
        "profile_written": None if written is None else str(written),
        "unanswered": list(facts.unanswered),
    }


def print_table(facts: site.SiteFacts, cfg: BeamConfig, rows: list[Check]) -> None:
    console = table_console()
    title = f"beam-slurm doctor: {cfg.recipe} on partition {facts.partition_name}, Slurm {facts.version}"
    table = verb_table(title)
    for column in ("check", "value", "verdict", "meaning", "fix"):
        table.add_column(column, overflow="fold", no_wrap=column in ("check", "verdict"))
    for row in rows:  # Slurm's words may hold brackets (n[1-4]): never markup
        verdict = f"[{COLOURS[row.verdict]}]{row.verdict}[/]"
        table.add_row(
            *(escape(cell) for cell in (row.name, row.value)), verdict, escape(row.meaning), escape(row.fix or "-")
        )
    fit_columns(table, console.width)
    console.print(table, highlight=False)
    counts = {v: sum(r.verdict == v for r in rows) for v in doctor.VERDICTS}
    console.print(", ".join(f"{n} {v}" for v, n in counts.items()), highlight=False)
