"""Every verb that shows something prints typed JSON with --json, as the README's "JSON output" describes: numbers as
numbers, booleans as booleans, job ids as text, ISO times, no display text where a value is meant. No Slurm here
(the sandbox tests read the same JSON of real jobs: test_cancel_sandbox, test_operator_sandbox,
test_full_pipeline_sandbox, test_operate_sandbox)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from test_status_labels import _run

from beam_slurm.cli import main as beam_slurm
from beam_slurm.core.run_record import RunRecord
from beam_slurm.core.run_store import RunStore
from beam_slurm.verbs.status import StatusRow, status_json

PATHS = ["paths.model_path=/shared/models/beam", "paths.data_dir=/shared/data", "paths.skyrl_dir=/shared/SkyRL",
         "cluster.check_paths_on_submit=false"]


def read_json(argv: list[str], capsys, code: int = 0):
    assert beam_slurm(argv) == code, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_plan_json_is_typed(capsys):
    plan = read_json(["plan", "recipe=bf16_64gpu", *PATHS, "--json"], capsys)
    assert plan["recipe"] == "bf16_64gpu" and plan["lora"] is False and plan["rehearsal"] is False
    assert plan["resources"]["nodes"] == 8 and plan["resources"]["total_gpus"] == 64
    assert plan["resources"]["time_limit_s"] == 86400 and isinstance(plan["resources"]["colocated"], bool)
    assert plan["parallelism"]["data_parallel"] * plan["parallelism"]["tensor_parallel"] * \
        plan["parallelism"]["pipeline_parallel"] * plan["parallelism"]["context_parallel"] == \
        plan["parallelism"]["training_gpus"]
    notice = plan["notice"]
    assert notice["save_fits"] is False and isinstance(notice["needed_s"], float) and notice["fix"], notice
    assert isinstance(plan["attempt"]["steps"], int) and plan["attempt"]["stalls"] is False
    assert plan["slurm"]["asked"] is False and plan["slurm"]["accepted"] is None  # no Slurm here
    assert [s["stage"] for s in plan["sbatch"]] == ["data", "container", "train"]
    train = plan["sbatch"][2]["command"]
    assert train.startswith("sbatch --parsable ") and "--nodes=8" in train and "train_bf16.sh" in train
    assert plan["skyrl"]["overrides"] and "trainer.project_name=beam" in plan["skyrl"]["overrides"]
    assert plan["config"]["cluster"]["nodes"] == 8 and plan["config"]["trainer"]["tags"] == []
    assert all(set(row) <= {"section", "item", "text", "fix"} and row["item"].strip() == row["item"]
               for row in plan["rows"])
    notice_row = next(r for r in plan["findings"] if r["item"] == "time-limit notice")
    assert notice_row["fix"] == notice["fix"]


def test_submit_json_of_a_dry_run_sweep(run_env, capsys):
    _, data = run_env
    answer = read_json(["submit", "-m", "--dry-run", "--json", "trainer.backend=rehearsal", "lora.rank=16,64", *data],
                       capsys)
    assert answer["dry_run"] is True and answer["sweep_dir"] and answer["invalid"] == []
    group = Path(answer["sweep_dir"]).name
    assert [r["wandb_group"] for r in answer["runs"]] == [group, group]
    first, second = answer["runs"]
    assert first["rehearsal"] is True and first["choices"] == ["lora.rank=16"]
    stages = {s["stage"]: s for s in first["stages"]}
    assert stages["train"]["status"] == "pending-submit" and stages["train"]["job_id"] is None
    assert stages["train"]["command"].startswith("sbatch --parsable") and stages["train"]["dependency_type"] == "afterok"
    assert f"trainer.wandb_group={group}" in stages["train"]["command"]
    assert {s["stage"]: s["shared_with"] for s in second["stages"]}["data"] == first["run_name"]
    assert not (Path(first["export_path"]) / "beam_run").exists()  # a dry run writes nothing


def test_status_json_is_typed(tmp_path, capsys):
    export = _run(tmp_path, "typed", ["trainer.backend=rehearsal"])
    answer = read_json(["status", str(export), "--json"], capsys)
    assert answer["title"] == "run typed"
    (train,) = [j for j in answer["jobs"] if j["stage"] == "train"]
    assert train["state"] == "SKIPPED" and train["job_id"] is None and train["checkpoint"] is None
    assert train["max_training_steps"] == 50 and train["restarts"] == 0 and train["attempts"] == []
    assert train["evaluation"] == {"step": 5, "origin": "beam", "rehearsal": False, "accuracy": {"aime2024": 0.5}}


def test_status_json_reads_each_runs_record_once(tmp_path, capsys, monkeypatch):
    one, two = _run(tmp_path, "one", []), _run(tmp_path, "two", ["trainer.backend=rehearsal"])
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"runs": [{"export_path": str(one), "choices": ["lora.rank=8"]},
                                                           {"export_path": str(two), "choices": ["lora.rank=16"]}]}))
    reads: list[Path] = []
    read = RunStore.read

    def counted(store: RunStore) -> RunRecord:
        reads.append(store.export_path)
        return read(store)

    monkeypatch.setattr(RunStore, "read", counted)
    answer = read_json(["status", str(one), "--json"], capsys)
    assert answer["title"] == "run one" and answer["goodput"] is not None
    assert reads == [one]
    reads.clear()
    answer = read_json(["status", str(sweep), "--json"], capsys)
    assert {j["run"] for j in answer["jobs"]} == {"one", "two"} and set(answer["goodput"]) == {"one", "two"}
    assert sorted(reads) == [one, two]


def test_status_json_nests_attempts_with_iso_times():
    record = RunRecord()
    record.begin_attempt(job_id="41", attempt=0, nodes=["n1", "n2"], checkpoint=None, when="2026-12-01T10:00:00+0000",
                         partition="batch", nodes_needed=2, user_exclude=[])
    record.end_attempt(job_id="41", attempt=0, when="2026-12-01T10:20:00+0000",
                       end={"end_kind": "notice", "saved_step": 12, "checkpoint_at_end": 12, "end_reason": "time limit"},
                       bad_nodes=[], outcome=None, outcome_reason="", resumable_end=False, wanted_handled=False)
    record.begin_attempt(job_id="41", attempt=1, nodes=["n3"], checkpoint=12, when="2026-12-01T10:21:00+0000",
                         partition="batch", nodes_needed=2, user_exclude=[])
    row = StatusRow("r", "train", "41", "RUNNING", 1, "1-02:03:04", "n3", "12/20", "", "", step=12, max_steps=20,
                    attempts=record.train_jobs["41"].attempts)
    (job,) = json.loads(json.dumps(status_json([row, StatusRow("r", "  attempt 0", *[""] * 3, 0, *[""] * 5)], "t")))[
        "jobs"]
    assert job["elapsed_s"] == 93784 and job["checkpoint"] == 12 and job["job_id"] == "41"
    first, second = job["attempts"]
    assert (first["attempt"], first["state"], first["saved_step"], first["checkpoint_at_end"]) == (0, "notice", 12, 12)
    assert first["in_job"] == 0 and first["replaced"] == []
    assert second["state"] == "running" and second["ended_at"] is None and second["checkpoint_at_start"] == 12
    assert first["nodes"] == ["n1", "n2"] and datetime.fromisoformat(first["started_at"]).tzinfo is not None
    assert datetime.fromisoformat(first["ended_at"]) <= datetime.fromisoformat(second["started_at"])


def test_report_json_is_typed(tmp_path, capsys):
    export = _run(tmp_path, "reported", [])
    (run,) = read_json(["report", str(export), "--json"], capsys)["runs"]
    (point,) = run["series"]["accuracy"]["aime2024"]["beam"]
    assert point["step"] == 5 and point["avg@k"] == 0.5 and point["k"] == 2 and point["rehearsal"] is False


def test_logs_json_lists_the_files(tmp_path, capsys):
    export = _run(tmp_path, "logged", [])
    RunStore(export).update(lambda run: run.begin_attempt(
        job_id="77", attempt=0, nodes=["n1"], checkpoint=None, when="2026-12-01T10:00:00+0000", partition="batch",
        nodes_needed=1, user_exclude=[]))
    attempt = export / "logs" / "77-0"
    (attempt / "ray" / "n1" / "logs").mkdir(parents=True)
    (attempt / "train_job.log").write_text("started\n")
    (attempt / "ray" / "n1" / "logs" / "raylet.out").write_text("raylet\n" * 3)
    (attempt / "ray" / "n1" / "COPY.json").write_text(json.dumps({"reason": "end", "time": 1.0, "bytes": 21}))
    listing = read_json(["logs", str(export), "--json"], capsys)
    assert listing["job_id"] == "77" and listing["attempt"] == "0" and listing["attempts"] == ["0"]
    assert listing["files"] == [{"path": str(attempt / "train_job.log"), "bytes": 8}]
    assert listing["batch_log"]["path"] is None and listing["batch_log"]["not_found"]  # no Slurm to ask here
    (node,) = listing["ray_logs"]
    assert node["node"] == "n1" and node["copy"]["reason"] == "end"
    assert node["files"] == [{"path": "logs/raylet.out", "bytes": 21}]
