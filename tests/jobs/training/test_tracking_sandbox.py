"""trainer.logger=wandb across a requeue on the Slurm sandbox, offline (no network here): the rehearsal trainer logs
through W&B as SkyRL's logger does; both attempts write offline folders under one run id kept in the run record, and
`beam-slurm sync RUN --dry-run` lists them in attempt order (W&B's own dry run reads them)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from test_operator_sandbox import QUICK, STEPS_PAST_THE_VERB, beam
from train_runs import wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


def test_one_wandb_run_id_across_a_requeue_and_the_sync_it_would_run(train_run):
    run = train_run(steps=STEPS_PAST_THE_VERB, ckpt_interval=100)  # the requeue verb arrives before the run's end
    run.submit("--time=00:10:00", overrides=(*QUICK, "trainer.logger=wandb"))
    run.wait_for_steps(2)
    requeued = beam(run, "requeue", str(run.export_path))
    assert requeued.returncode == 0, requeued.stdout + requeued.stderr + run.output()[-4000:]
    wait_for(lambda: 1 in run.steps_by_attempt(), 240, "the next attempt's first step")
    assert run.finish(timeout=300) == "COMPLETED", run.output()[-6000:]

    record = json.loads((run.export_path / "beam_run" / "run.json").read_text())
    run_id = record["tracking"]["wandb_run_id"]
    assert record["tracking"]["chosen_by_job"] == run.job_id and len(run_id) == 8
    attempts = sorted((run.export_path / "beam_run" / "wandb").iterdir())
    assert [a.name for a in attempts] == [f"{run.job_id}-0", f"{run.job_id}-1"]
    offline = []
    for attempt in attempts:  # what W&B wrote offline in each attempt's own WANDB_DIR, under the one run id
        found = list((attempt / "wandb").glob("offline-run-*"))
        assert [f.name.rsplit("-", 1)[1] for f in found] == [run_id], found
        assert (found[0] / f"run-{run_id}.wandb").stat().st_size > 0
        assert (found[0] / "files").is_dir() and (found[0] / "logs").is_dir()
        offline.append(found[0])

    sync = beam(run, "sync", str(run.export_path), "--dry-run")
    assert sync.returncode == 0, sync.stdout + sync.stderr
    wandb = str(Path(sys.executable).with_name("wandb"))
    commands = [line for line in sync.stdout.splitlines() if line.startswith(wandb)]
    assert commands == [shlex.join([wandb, "sync", "--id", run_id, str(f)]) for f in offline], sync.stdout
    assert "Would sync 2 run(s)" in sync.stdout + sync.stderr, sync.stdout + sync.stderr
