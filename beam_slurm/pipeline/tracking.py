"""Experiment tracking across requeues: one W&B run for the whole run, whatever the number of attempts.

Each requeued attempt is a new process, and W&B ignores `resume` in offline mode (compute nodes often have no
internet), so without care every attempt would be a run of its own. Here:

- the training job chooses one W&B run id at its first attempt and keeps it in the run record
  (`<export_path>/beam_run/run.json`, key `tracking`); every later attempt reads it back (`job_env`);
- every attempt's trainer gets WANDB_RUN_ID (that id), WANDB_RESUME=allow, WANDB_MODE (`trainer.wandb_mode`, offline
  by default) and its own WANDB_DIR, `<export_path>/beam_run/wandb/<jobid>-<attempt>/`, so attempts never write into
  one another's offline folder;
- `beam-slurm sync RUN` uploads the attempts' offline folders, in attempt order, into that one run:
  `wandb sync --id <id> <folder>` per attempt (wandb >= 0.31 syncs a folder into the existing run named by `--id`,
  appending; folders of one run are synced one after another in order of start time). `--dry-run` prints the
  commands only.

The static part of the environment (mode, resume) comes from `beam_slurm.skyrl.command.skyrl_env`; the rehearsal
trainer logs through `open_run`/`log` as SkyRL's own W&B logger does (wandb.init with project and name; id, resume,
mode and folder from the environment).
"""

from __future__ import annotations

import os
import secrets
import shlex
import string
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from beam_slurm.core.layout import RUN_DIRNAME
from beam_slurm.core.run_record import RunRecord, Tracking
from beam_slurm.core.run_store import RunStore, now

WANDB_FOLDER = "wandb"
"""Folder under `beam_run/` with one WANDB_DIR per attempt (`<jobid>-<attempt>`)."""
_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_run_id() -> str:
    """A W&B-style run id: 8 lowercase letters and digits."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))


def ensure_run_id(export_path: str | os.PathLike, job_id: str) -> str:
    """The run's W&B id from the run record, chosen and recorded now when this is the run's first attempt."""

    def change(run: RunRecord) -> str:
        if run.tracking is None or not run.tracking.wandb_run_id:
            run.tracking = Tracking(logger="wandb", wandb_run_id=new_run_id(), chosen_by_job=str(job_id),
                                    chosen_at=now())
        return run.tracking.wandb_run_id

    return RunStore(export_path).update(change)


def attempt_dir(export_path: str | os.PathLike, job_id: str, attempt: int) -> Path:
    """WANDB_DIR of one attempt."""
    return Path(export_path) / RUN_DIRNAME / WANDB_FOLDER / f"{job_id}-{attempt}"


def job_env(cfg: Any, environ: Mapping[str, str]) -> dict[str, str]:
    """The per-attempt W&B environment for the trainer (inside the allocation); {} unless trainer.logger=wandb."""
    if cfg.trainer.logger != "wandb":
        return {}
    job_id = environ.get("SLURM_JOB_ID", "local")
    attempt = int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
    folder = attempt_dir(cfg.paths.export_path, job_id, attempt)
    folder.mkdir(parents=True, exist_ok=True)
    return {"WANDB_RUN_ID": ensure_run_id(cfg.paths.export_path, job_id), "WANDB_RESUME": "allow",
            "WANDB_MODE": cfg.trainer.wandb_mode, "WANDB_DIR": str(folder)}


# --- the trainer side (the rehearsal; SkyRL's logger does the same) --------------------------------------------------

def open_run(environ: Mapping[str, str], name: str, config: dict | None = None) -> Any:
    """wandb.init as SkyRL's W&B logger calls it, when the job set WANDB_RUN_ID (trainer.logger=wandb); else None."""
    if not environ.get("WANDB_RUN_ID"):
        return None
    import wandb

    return wandb.init(project=environ.get("WANDB_PROJECT", "beam"), name=name, config=config or {})


def log(run: Any, metrics: dict, step: int) -> None:
    if run is not None:
        run.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)


# --- beam-slurm sync ----------------------------------------------------------------------------------------------

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
        return (job_order.get(job_id, len(job_order)), int(job_id) if job_id.isdigit() else 0,
                int(attempt) if attempt.isdigit() else 0)

    found = []
    for attempt_folder in sorted((p for p in base.iterdir() if p.is_dir()), key=order):
        found += sorted((attempt_folder / "wandb").glob(f"offline-run-*-{run_id}"))
    return found


def sync_commands(export_path: Path, run: RunRecord) -> list[list[str]]:
    """`wandb sync --id <id> <folder>` for each attempt's offline folder, in attempt order."""
    run_id = _wandb_run_id(run)
    wandb = str(Path(sys.executable).with_name("wandb"))
    return [[wandb, "sync", "--id", run_id, str(folder)] for folder in offline_folders(export_path, run)]


def build_parser():
    """The verb's parser: RUN, --dry-run, --exports-root. It reads no recipe key."""
    from beam_slurm.config.verb_args import VerbArgs

    verb = VerbArgs("sync", "Upload a run's offline W&B folders, attempt by attempt, into its one W&B run.",
                    settings=False)
    verb.add_argument("target", help="run folder, run name or training job id")
    verb.add_argument("--dry-run", action="store_true", help="print the wandb sync commands, run nothing")
    verb.add_argument("--exports-root", default=None, help="where run names are looked up")
    return verb


def main(argv: list[str]) -> int:
    from beam_slurm.config.verb_args import VerbUsageError
    from beam_slurm.pipeline.runs import RunNotFound, resolve_run

    verb = build_parser()
    try:
        args = verb.parse(argv).args
        export_path = resolve_run(args.target, args.exports_root)
    except (VerbUsageError, RunNotFound) as exc:
        return verb.fail(exc)
    run = RunStore(export_path).read()
    run_id = _wandb_run_id(run)
    if not run_id:
        return verb.fail(f"{export_path} has no W&B run id in {RUN_DIRNAME}/run.json: the run did not log with "
                         "trainer.logger=wandb")
    commands = sync_commands(export_path, run)
    if not commands:
        return verb.fail(f"no offline W&B folders of run {run_id} under {export_path / RUN_DIRNAME / WANDB_FOLDER}")
    print(f"beam-slurm sync: W&B run {run_id}: {len(commands)} attempt folder(s) in attempt order")
    if args.dry_run:  # what W&B itself would do with these folders (reads them, needs no network)
        for command in commands:
            print(shlex.join(command), flush=True)
        listing = [commands[0][0], "sync", "--dry-run", "--id", run_id, *(c[-1] for c in commands)]
        return subprocess.run(listing, check=False).returncode
    for command in commands:
        print(shlex.join(command), flush=True)
        done = subprocess.run(command, check=False)
        if done.returncode != 0:
            return verb.fail(f"wandb sync failed ({done.returncode}) on {command[-1]}; the attempts after it were "
                             "not synced (run the verb again once fixed)", status=1)
    return 0
