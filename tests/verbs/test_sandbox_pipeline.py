"""The pipeline on the Slurm sandbox: real sbatch, dependencies, sacct, squeue; the stage jobs are the real batch
scripts (prepare-data for real, the image import by the test double tests/support/test_doubles/fake_image_import,
since no container runtime exists here). Training jobs are submitted for real and cancelled by the test once their
dependency is checked: a full training run is the training tests' subject, not this file's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline_inputs import IMAGE, fake_runtime_bin, make_sources

from beam_slurm.verbs import status as status_mod
from beam_slurm.verbs import submit as submit_mod

pytestmark = pytest.mark.sandbox


@pytest.fixture
def sandbox_run(slurm_sandbox, monkeypatch):
    """Run inputs on the sandbox's shared folder (nodes have a private /tmp); yields (root, data overrides, jobs)
    and cancels every job the test submitted."""
    root = slurm_sandbox.new_dir("pipeline")
    for name in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "MAX_TRAINING_STEPS", "BEAM_SLURM_HOME",
                 "BEAM_CONTAINER_IMAGE", "BEAM_TRAINER_BACKEND", "XDG_STATE_HOME", "BEAM_EXPORTS_ROOT"):
        monkeypatch.delenv(name, raising=False)
    for sub in ("model", "skyrl", "home"):
        (root / sub).mkdir()
    bin_dir = fake_runtime_bin(root / "bin")
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("MODEL_PATH", str(root / "model"))
    monkeypatch.setenv("DATA_DIR", str(root / "data"))
    monkeypatch.setenv("SKYRL_DIR", str(root / "skyrl"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_RUNTIME_LOG", str(root / "runtime.log"))
    # The stage scripts ask for a real cluster's memory (8-16 GB); sandbox nodes have 8000 MB. sbatch's input
    # variable overrides the #SBATCH header, as a site would do for its own small nodes.
    monkeypatch.setenv("SBATCH_MEM_PER_NODE", "300M")
    submitted: list[str] = []
    yield root, make_sources(root / "sources"), submitted
    for job in submitted:
        slurm_sandbox.cancel(job)


def run_submit(argv: list[str], capsys) -> tuple[int, str, str]:
    code = submit_mod.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def job_ids(out: str) -> dict[str, str]:
    """stage -> job id from submit's output (first run's block)."""
    ids = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("data", "container", "train") and parts[1] == "job":
            ids.setdefault(parts[0], parts[2].rstrip(","))
    return ids


def status_rows(target: str, capsys) -> list[dict]:
    assert status_mod.main([target, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["jobs"]


CHAIN = ["recipe=lora_16gpu", "trainer.backend=rehearsal", "max_training_steps=4", "checkpoint.interval=2",
         "cluster.time_limit=00:10:00", "cluster.signal_before_s=60", "cluster.grace_s=30", "cluster.stop_grace_s=20",
         "container.runtime=pyxis", f"container.image={IMAGE}"]


def test_chain_dependencies_and_a_second_submit_that_needs_nothing(slurm_sandbox, sandbox_run, capsys):
    root, data, submitted = sandbox_run
    argv = [*CHAIN, f"container.image_cache_dir={root}/cache", *data]
    code, out, err = run_submit(argv, capsys)
    assert code == 0, err
    ids = job_ids(out)
    submitted += ids.values()
    assert set(ids) == {"data", "container", "train"}, out
    # Hold the training job so it is deterministically still queued at the second submit below.
    subprocess.run(["scontrol", "hold", ids["train"]], env=slurm_sandbox.env(), check=True, timeout=60)
    dependency = slurm_sandbox.scontrol_job(ids["train"]).get("Dependency", "")
    assert dependency.startswith(f"afterok:{ids['data']}") and f"afterok:{ids['container']}" in dependency, dependency

    assert slurm_sandbox.wait(ids["data"], timeout=180) == "COMPLETED"
    assert slurm_sandbox.wait(ids["container"], timeout=180) == "COMPLETED"
    rows = {r["stage"]: r for r in status_rows(str(root / "home" / "exports" / "beam_lora_16gpu"), capsys)}
    assert rows["data"]["state"] == rows["container"]["state"] == "COMPLETED"
    assert rows["data"]["nodes"] and rows["train"]["job_id"] == ids["train"]
    accounted = {row["JobID"]: row for row in slurm_sandbox.sacct(ids["data"], allocations_only=True)}
    assert accounted[ids["data"]]["State"] == "COMPLETED"
    assert sorted(p.name for p in (root / "data").iterdir() if not p.name.startswith(".")) == [
        "aime-2024-cleaned.parquet", "aime-2025-cleaned.parquet", "dapo-math-17k-cleaned.parquet",
        "prepare-data-manifest.json"]
    assert (root / "cache" / "ghcr.io+example+skyrl+beam-release.sqsh.digest.json").is_file()

    # Again: data and image are complete, and the training job is still queued (or already ran): nothing new
    # may be submitted for data/container, and never a second trainer on the same checkpoint folder.
    assert slurm_sandbox.scontrol_job(ids["train"]).get("JobState") == "PENDING"
    code, out2, err2 = run_submit(argv, capsys)
    assert code == 1, err2  # asked to queue a training job that is queued already: not queued again, said so
    submitted += job_ids(out2).values()
    assert "data       skipped    complete:" in out2 and "container  skipped    complete:" in out2, out2
    assert f"train      job {ids['train']}" in out2 and "already pending" in out2 and "not submitted again" in out2, out2
    assert f"train: not queued again: job {ids['train']} is PENDING" in err2 and "--queue-anyway" in err2, err2
    starts = [line for line in (root / "runtime.log").read_text().splitlines() if line.startswith("start ")]
    assert len(starts) == 1  # the image was imported once
    run = json.loads((root / "home" / "exports" / "beam_lora_16gpu" / "beam_run" / "run.json").read_text())
    assert [s["status"] for s in run["submissions"][-1]["stages"]][:2] == ["skipped", "skipped"]
    assert len(run["submissions"]) == 2


def test_failed_stage_leaves_dependents_pending_and_status_says_why(slurm_sandbox, sandbox_run, capsys):
    root, data, submitted = sandbox_run
    broken = [o if not o.startswith("data.dapo_math=") else f"data.dapo_math={root}/missing.parquet" for o in data]
    code, out, err = run_submit(["--stages", "data,train", *CHAIN, *broken], capsys)
    assert code == 0, err
    ids = job_ids(out)
    submitted += ids.values()
    assert slurm_sandbox.wait(ids["data"], timeout=180) == "FAILED"
    export = str(root / "home" / "exports" / "beam_lora_16gpu")
    for _ in range(30):  # the controller marks the dependency as never satisfied on its next pass
        rows = {r["stage"]: r for r in status_rows(export, capsys)}
        if "DependencyNeverSatisfied" in rows["train"]["reason"]:
            break
        time.sleep(2)
    assert rows["data"]["state"] == "FAILED" and rows["data"]["reason"].startswith("exit code 2")
    assert rows["train"]["state"] == "PENDING"  # not cancelled: nothing the user did not ask for
    assert f"data job {ids['data']} FAILED" in rows["train"]["reason"], rows["train"]
    assert slurm_sandbox.scontrol_job(ids["train"]).get("JobState") == "PENDING"


def test_two_by_two_sweep_refused_then_submitted_without_the_invalid_point(slurm_sandbox, sandbox_run, capsys):
    root, data, submitted = sandbox_run
    sweep = ["-m", "--stages", "data,train", "recipe=lora_16gpu", "precision=bf16,mxfp8", "lora.rank=0,64",
             "trainer.backend=rehearsal", "cluster.time_limit=00:10:00", "cluster.signal_before_s=60",
             "cluster.grace_s=30", "cluster.stop_grace_s=20", *data]
    code, out, err = run_submit(sweep, capsys)
    assert code == 2 and "precision=mxfp8 lora.rank=64" in err and out == ""
    assert not (root / "home" / "exports").exists()

    code, out, err = run_submit(["--skip-invalid", *sweep], capsys)
    assert code == 0, err
    trains = [line.split()[2] for line in out.splitlines() if line.split()[:2] == ["train", "job"]]
    data_jobs = {line.split()[2].rstrip(",") for line in out.splitlines() if line.split()[:2] == ["data", "job"]}
    submitted += trains + list(data_jobs)
    assert len(trains) == 3 and len(set(trains)) == 3 and len(data_jobs) == 1, out
    sweep_dir = out.strip().splitlines()[-1].split()[1]
    record = json.loads((Path(sweep_dir) / "sweep.json").read_text())
    assert [r["run_name"] for r in record["runs"]] == ["beam_lora_16gpu-precision_bf16-rank_0",
                                                      "beam_lora_16gpu-precision_bf16-rank_64",
                                                      "beam_lora_16gpu-precision_mxfp8-rank_0"]
    assert record["invalid"][0]["choices"] == ["precision=mxfp8", "lora.rank=64"]
    assert len({r["ckpt_path"] for r in record["runs"]}) == 3
    rows = status_rows(sweep_dir, capsys)
    assert [(r["run"], r["stage"]) for r in rows] == [(r["run_name"], s) for r in record["runs"] for s in ("data", "train")]
    assert {r["job_id"] for r in rows if r["stage"] == "train"} == set(trains)
    assert all(r["state"] in ("PENDING", "RUNNING", "COMPLETED", "FAILED") for r in rows)
    # Without an argument, status shows the sweep submitted last.
    assert status_mod.main(["--json"]) == 0
    last = json.loads(capsys.readouterr().out)["jobs"]
    assert [(r["run"], r["stage"], r["job_id"]) for r in last] == [(r["run"], r["stage"], r["job_id"]) for r in rows]
    table = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "status", sweep_dir],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert table.returncode == 0 and all(t in table.stdout for t in trains), table.stderr


def test_slurm_is_asked_before_anything_is_queued(slurm_sandbox, sandbox_run, capsys):
    """sbatch --test-only for each job of the dry run: a partition that does not exist and more nodes than the
    partition has are refused with Slurm's own answer and the setting to change; a job Slurm takes passes."""
    root, data, submitted = sandbox_run
    base = ["--dry-run", "recipe=lora_16gpu", "trainer.backend=rehearsal", *data]
    code, out, err = run_submit([*base, "cluster.partition=gpux"], capsys)
    assert code == 2 and "Slurm refuses the train job" in err and "change cluster.partition" in err, err
    assert "partition" in err.lower()
    code, out, err = run_submit([*base, "cluster.nodes=64"], capsys)
    assert code == 2 and "Slurm refuses the train job" in err and "cluster.nodes" in err, err
    code, out, err = run_submit([*base, "cluster.nodes=2"], capsys)
    assert code == 0 and "dry run: nothing submitted" in out, err
    code, out, err = run_submit([*base, "cluster.partition=gpux", "cluster.ask_slurm_on_submit=false"], capsys)
    assert code == 0, err
    from beam_slurm.verbs.plan import main as plan_main

    keys = ["recipe=lora_16gpu", "trainer.backend=rehearsal", "cluster.check_paths_on_submit=false", *data]
    assert plan_main([*keys, "cluster.partition=gpux"]) == 2
    out = capsys.readouterr().out
    assert "sbatch --test-only" in out and "REFUSED" in out and "cluster.partition" in out, out
    assert plan_main([*keys, "--json"]) == 0
    slurm = json.loads(capsys.readouterr().out)["slurm"]
    assert slurm["asked"] is True and slurm["accepted"] is True and slurm["never_starts"] == [], slurm
