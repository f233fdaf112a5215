"""`beam-slurm cancel RUN|SWEEP`: end every queued and running job of runs at once (nothing is saved; `stop` saves
first)."""

from __future__ import annotations

import sys

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError
from beam_slurm.core.run_record import Cancel, RunRecord
from beam_slurm.core.run_store import RunStore, now
from beam_slurm.launch import runs
from beam_slurm.slurm import scheduler
from beam_slurm.slurm.submission import job_records


def build_parser():
    verb = VerbArgs(
        "cancel",
        "beam-slurm cancel RUN|SWEEP [--yes]: cancel the run's (or every point of the sweep's) "
        "queued and running jobs, asking first; nothing is saved (`stop` saves first).",
        settings=False,
    )
    verb.add_argument("target", metavar="RUN|SWEEP", help="run folder, run name, job id, or sweep folder")
    verb.add_argument("--yes", action="store_true", help="cancel without asking (needed where there is no terminal)")
    verb.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    return verb


def _answer(question: str) -> str:
    try:
        return input(question).strip().lower()
    except EOFError:  # Ctrl-D: no
        return ""


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        args = verb.parse(argv).args
        targets = runs.resolve_runs(args.target, args.exports_root)
        if not args.yes and not sys.stdin.isatty():
            raise VerbUsageError("no terminal to ask on: pass --yes to cancel without asking")
    except (VerbUsageError, runs.RunNotFound) as exc:
        return verb.fail(exc)
    owners: dict[str, list[RunStore]] = {}  # a sweep's points share their data and container jobs
    for target in targets:
        store = RunStore(target.export_path)
        for job_id in store.read().job_ids() | {str(e.job_id) for e in store.evaluations() if e.job_id}:
            owners.setdefault(job_id, []).append(store)
    try:
        records = job_records(owners)
    except scheduler.SlurmCommandError as exc:
        return verb.fail(f"could not ask which jobs of {args.target} are queued or running, none cancelled: {exc}", 1)
    live = {job_id: r.state for job_id, r in records.items() if r.active}
    if not live:
        print(f"{verb.prefix}no job of {args.target} is queued or running; nothing to cancel")
        return 0
    for job_id, state in live.items():
        names = ", ".join(sorted({s.read().run_name or s.export_path.name for s in owners[job_id]}))
        print(f"  job {job_id:<8} {state:<10} {names}")
    if not args.yes and _answer(f"cancel these {len(live)} job(s)? [y/N] ") not in ("y", "yes"):
        print(f"{verb.prefix}nothing cancelled")
        return 1
    try:
        scheduler.cancel(*live)
    except scheduler.SlurmCommandError as exc:
        maybe = "some may be cancelled (`beam-slurm status` shows which)"
        done = maybe if scheduler.may_have_been_done(exc) else "none cancelled"
        return verb.fail(f"could not cancel the jobs, {done}: {exc}", status=1)
    stores = {str(s.export_path): s for job_id in live for s in owners[job_id]}
    when, user = now(), runs.user_name()
    for store in stores.values():
        mine = [j for j in live if store in owners[j]]

        def change(record: RunRecord, mine: list[str] = mine) -> None:
            record.record_cancel(Cancel(requested_at=when, by=user, job_ids=mine, states={j: live[j] for j in mine}))

        store.update(change)
    print(f"{verb.prefix}cancelled {len(live)} job(s) of {len(stores)} run(s): {' '.join(live)}")
    return 0
