"""What `beam-slurm requeue RUN` and `beam-slurm stop RUN` share: end a running training attempt gracefully (the wanted
outcome in the run record, USR2 to the batch shell only, a wait for the save; docs: guides/operations.md tells the
rest)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from omegaconf import OmegaConf

from beam_slurm.config.overrides import override_key
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.verb_args import VerbArgs, VerbUsageError
from beam_slurm.core import layout, notice
from beam_slurm.core.errors import ConfigError
from beam_slurm.core.run_record import Attempt, RunRecord, Wanted
from beam_slurm.core.run_store import RunStore
from beam_slurm.launch import runs
from beam_slurm.slurm import scheduler

OPERATOR_SIGNAL = "USR2"  # the batch shell then reads the wanted outcome
_POLL_S = 0.5
_RECORD_MARGIN_S = 30.0  # for the batch shell to record its end


def build_parser(verb: str = "requeue"):
    """The parser of `requeue` or `stop`; RUN is taken out of argv first (`split_run`)."""
    what = {
        "requeue": "save at the next step boundary, then requeue the job (the next attempt resumes from it)",
        "stop": "save at the next step boundary, then end the job as stopped (resumable with `beam-slurm submit`)",
    }
    args = VerbArgs(
        verb,
        f"beam-slurm {verb} RUN [key=value ...]: {what[verb]}.\n\nRUN: the run folder (its "
        "export path), its run name, or the training job's id.",
        keys=["cluster.grace_s", "cluster.stop_grace_s"],
        inputs="RUN",
    )
    args.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait for the save (default: the run's cluster.grace_s)"
    )
    args.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    return args


_VALUED_FLAGS = ("--timeout", "--exports-root", "--help-keys")


def split_run(argv: list[str]) -> tuple[str | None, list[str]]:
    """(RUN, the other arguments): RUN is the first word that is neither a flag, a flag's value nor key=value."""
    for i, word in enumerate(argv):
        if not (word.startswith("-") or (i > 0 and argv[i - 1] in _VALUED_FLAGS) or "=" in word.split("/", 1)[0]):
            return word, argv[:i] + argv[i + 1 :]
    return None, list(argv)


def _run_setting(export_path: Path, key: str, given: dict[str, str], cfg: BeamConfig) -> float:
    """A cluster.* number: given on the command line, else the run's own config.yaml, else the recipe's."""
    if key not in given:
        with contextlib.suppress(Exception):  # no config.yaml (yet), or an older one without the key
            return float(OmegaConf.select(OmegaConf.load(layout.run_dir(export_path) / layout.CONFIG_FILE), key))
    return float(getattr(cfg.cluster, key.split(".", 1)[1]))


def _job_of(run: RunRecord) -> str:
    job = run.latest_train_job()
    submitted = run.submitted_job_ids("train")
    # A newer submission whose job has not started yet has no train_jobs entry.
    if submitted and (job is None or submitted[-1] not in run.train_jobs):
        return submitted[-1]
    return job.job_id if job else ""


def main_for(verb: str, argv: list[str]) -> int:
    parser = build_parser(verb)
    target, argv = split_run(argv)
    try:
        parsed = parser.parse(argv)
        args = parsed.args
        if not target:
            raise VerbUsageError("give RUN: the run folder (export path), run name or training job id")
        if args.timeout is not None and args.timeout <= 0:
            raise VerbUsageError(f"--timeout {args.timeout:g}: use a positive number of seconds")
        cfg = parser.load(parsed)
        export_path = runs.resolve_run(target, args.exports_root)
    except (VerbUsageError, ConfigError, runs.RunNotFound) as exc:
        return parser.report(exc)
    given = {override_key(o): o for o in parsed.overrides}
    timeout = args.timeout if args.timeout is not None else _run_setting(export_path, "cluster.grace_s", given, cfg)
    stop_grace = _run_setting(export_path, "cluster.stop_grace_s", given, cfg)
    store = RunStore(export_path)
    run = store.read()
    job_id = _job_of(run)
    if not job_id:
        return parser.fail(f"run {run.run_name or export_path} has no training job yet", status=1)
    try:
        state = scheduler.job_state(job_id)
    except scheduler.SlurmCommandError as exc:
        return parser.fail(f"could not ask whether job {job_id} runs, nothing was sent to it: {exc}", status=1)
    out = lambda text: print(f"{parser.prefix}{text}")  # noqa: E731
    if state in ("PENDING", "REQUEUED", "REQUEUE_HOLD"):
        if verb == "requeue":
            out(f"job {job_id} is {state.lower()}: nothing runs, nothing to requeue")
            return 0
        return _stop_pending(store, job_id, run, out, parser)
    if state not in ("RUNNING", "CONFIGURING"):
        job = run.train_jobs.get(job_id)
        ended = (job.outcome_reason if job else "") or (state.lower() if state else "no longer known to squeue")
        return parser.fail(f"job {job_id} is not running ({ended}); nothing to {verb}", status=1)
    return _signal_and_wait(verb, store, job_id, run, timeout, stop_grace, out, parser)


def _stop_pending(store: RunStore, job_id: str, run: RunRecord, out, parser) -> int:
    try:
        scheduler.cancel(job_id)
    except scheduler.SlurmCommandError as exc:
        return parser.fail(f"job {job_id} is pending and could not be cancelled{_maybe(exc)}: {exc}", status=1)
    step = layout.latest_checkpoint_step(run.ckpt_path)
    what = f"stopped at step {step}, resumable" if step is not None else "stopped before any checkpoint"

    def change(record: RunRecord) -> None:
        job = record.train_job(job_id)
        job.outcome, job.outcome_reason, job.resumable = (
            "stopped",
            f"{what} (cancelled while pending)",
            step is not None,
        )

    store.update(change)
    out(f"job {job_id} was pending: cancelled, nothing to save; {what}")
    return 0


def _signal_and_wait(
    verb: str, store: RunStore, job_id: str, run: RunRecord, timeout: float, stop_grace: float, out, parser
) -> int:
    ckpt_path = run.ckpt_path
    wanted = runs.set_wanted(store, job_id=job_id, action=verb, timeout_s=timeout)
    asked = float(wanted.requested_time)
    try:
        scheduler.signal_batch(job_id, OPERATOR_SIGNAL)
    except scheduler.SlurmCommandError as exc:
        if scheduler.may_have_been_done(exc):
            # The signal may have arrived: the batch shell then needs the wanted outcome, so it stays.
            return parser.fail(f"job {job_id}'s batch shell may not have been signalled{_maybe(exc)}: {exc}", status=1)
        _withdraw(store, wanted, run.wanted)
        return parser.fail(f"could not signal job {job_id}'s batch shell, the request withdrawn: {exc}", status=1)
    out(
        f"asked job {job_id} to save at the next step boundary and {'requeue' if verb == 'requeue' else 'stop'} "
        f"(waiting up to {timeout:.0f}s for the save)"
    )
    saved = None
    deadline = asked + timeout + stop_grace + _RECORD_MARGIN_S
    while time.time() < deadline:
        if saved is None and ckpt_path:
            saved = notice.saved_since(ckpt_path, asked)
            if saved is not None:
                out(
                    f"checkpoint of step {saved} saved after {time.time() - asked:.1f}s: "
                    f"{ckpt_path}/global_step_{saved}"
                )
        record = store.read()
        handled = record.wanted.handled_by_attempt if record.wanted else None
        job = record.train_jobs.get(job_id) if handled is not None else None
        # job is only looked up once record.wanted names the attempt that handled it
        if (
            job is not None
            and handled is not None
            and record.wanted
            and (attempt := job.attempt(handled, record.wanted.handled_in_job)) is not None
        ):
            return _report(job_id, attempt, saved, out)
        if time.time() > asked + timeout and saved is None and not ckpt_path:
            break
        time.sleep(_POLL_S)
    out(f"job {job_id} did not record its end within {deadline - asked:.0f}s; see `beam-slurm status {job_id}`")
    return 1


def _maybe(exc: Exception) -> str:
    """What to add when the daemon timed out: it may have done it after all."""
    if scheduler.may_have_been_done(exc):
        return " (or it was, and the answer was lost: `beam-slurm status` shows which)"
    return ""


def _withdraw(store: RunStore, wanted: Wanted, before: Wanted | None) -> None:
    """Put back the run's wanted outcome as it was before `wanted` replaced it (no signal reached the job)."""

    def change(record: RunRecord) -> None:
        if record.wanted is not None and record.wanted.requested_time == wanted.requested_time:
            record.wanted = before

    store.update(change)


def _report(job_id: str, attempt: Attempt, saved: int | None, out) -> int:
    step, saved = attempt.checkpoint_at_end, attempt.saved_step if saved is None else saved
    if saved is None:
        out(
            f"no checkpoint saved within the grace time ({attempt.end_reason}); the latest complete "
            f"checkpoint is {'step ' + str(step) if step is not None else 'none'}"
        )
    if attempt.end_kind == "stopped":
        out(
            f"job {job_id} stopped at step {step}, resumable: `beam-slurm submit` with the run's settings resumes it"
            if step is not None
            else f"job {job_id} stopped before any checkpoint"
        )
        return 0 if saved is not None else 1
    if attempt.decision in ("requeue", "requeued by Slurm"):
        out(f"job {job_id} requeued: attempt {attempt.attempt + 1} resumes from step {step}")
        return 0 if saved is not None else 1
    out(f"job {job_id}: {attempt.end_reason}")
    return 1
