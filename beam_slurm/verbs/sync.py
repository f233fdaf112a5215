"""`beam-slurm sync RUN [--dry-run]`: upload a run's offline W&B folders into its one W&B run, `wandb sync --id <id>
<folder>` per attempt in order (wandb >= 0.31 appends to the run `--id` names); why one id:
`beam_slurm.jobs.training.tracking`.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError
from beam_slurm.core.layout import RUN_DIRNAME
from beam_slurm.core.run_record import RunRecord
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.training.tracking import WANDB_FOLDER
from beam_slurm.launch.runs import RunNotFound, resolve_run


def _wandb_run_id(run: RunRecord) -> str | None:
    return run.tracking.wandb_run_id if run.tracking else None


def offline_folders(export_path: Path, run: RunRecord) -> list[Path]:
    """Every attempt's offline run folder of the run's W&B id, in attempt order (jobs as the record lists them)."""
    run_id = _wandb_run_id(run)
    base = export_path / RUN_DIRNAME / WANDB_FOLDER
    if not run_id or not base.is_dir():
        return []
    job_order = {job_id: i for i, job_id in enumerate(run.train_jobs)}

    def order(folder: Path) -> tuple:
        job_id, _, attempt = folder.name.rpartition("-")
        return (
            job_order.get(job_id, len(job_order)),
            int(job_id) if job_id.isdigit() else 0,
            int(attempt) if attempt.isdigit() else 0,
        )

    return [
        found
        for attempt_folder in sorted((p for p in base.iterdir() if p.is_dir()), key=order)
        for found in sorted((attempt_folder / "wandb").glob(f"offline-run-*-{run_id}"))
    ]


def sync_commands(export_path: Path, run: RunRecord) -> list[list[str]]:
    run_id = _wandb_run_id(run)
    if not run_id:
        return []  # no W&B run id: no offline folders either
    wandb = str(Path(sys.executable).with_name("wandb"))
    return [[wandb, "sync", "--id", run_id, str(folder)] for folder in offline_folders(export_path, run)]


def build_parser():
    verb = VerbArgs(
        "sync", "Upload a run's offline W&B folders, attempt by attempt, into its one W&B run.", settings=False
    )
    verb.add_argument("target", metavar="RUN", help="run folder, run name or training job id")
    verb.add_argument("--dry-run", action="store_true", help="print the wandb sync commands, run nothing")
    verb.add_argument("--exports-root", default=None, help="where run names are looked up")
    return verb


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        args = verb.parse(argv).args
        export_path = resolve_run(args.target, args.exports_root)
    except (VerbUsageError, RunNotFound) as exc:
        return verb.fail(exc)
    run = RunStore(export_path).read()
    run_id = _wandb_run_id(run)
    if not run_id:
        return verb.fail(
            f"{export_path} has no W&B run id in {RUN_DIRNAME}/run.json: the run did not log with trainer.logger=wandb"
        )
    commands = sync_commands(export_path, run)
    if not commands:
        return verb.fail(f"no offline W&B folders of run {run_id} under {export_path / RUN_DIRNAME / WANDB_FOLDER}")
    print(f"beam-slurm sync: W&B run {run_id}: {len(commands)} attempt folder(s) in attempt order")
    for command in commands:
        print(shlex.join(command), flush=True)
        done = None if args.dry_run else subprocess.run(command, check=False)
        if done is not None and done.returncode != 0:
            return verb.fail(
                f"wandb sync failed ({done.returncode}) on {command[-1]}; the attempts after it were "
                "not synced (run the verb again once fixed)",
                status=1,
            )
    if args.dry_run:  # what W&B itself would do with these folders (reads them, needs no network)
        listing = [commands[0][0], "sync", "--dry-run", "--id", run_id, *(c[-1] for c in commands)]
        return subprocess.run(listing, check=False).returncode
    return 0
