"""Every verb with `--json` has a JSON Schema generated from the types that build its output (docs/json_schemas.py),
and its real output validates against it; a key the types do not name, or a value of the wrong type, fails. No Slurm
here: each output is produced as tests/verbs/test_json_output.py produces it (the sandbox scenarios check real jobs'
output with tests/support/json_output_checks.py)."""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from json_output_checks import assert_json_valid, json_schemas
from test_json_output import PATHS, read_json
from test_report import _graded, _responses, _skyrl_dump, _write_jsonl
from test_status_labels import _run

from beam_slurm.cli import VERBS, verb_module
from beam_slurm.core.run_record import RunRecord
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.evaluation.metrics import compute_metrics
from beam_slurm.jobs.evaluation.results import evaluation_dir, write_results
from beam_slurm.launch.run_results import TRAIN_METRICS_FILE
from beam_slurm.policy.goodput import Ledger, restart_phases
from beam_slurm.slurm import site
from beam_slurm.verbs.status import StatusRow, goodput_json, status_json

FIXTURES = Path(__file__).resolve().parents[1] / "slurm" / "fixtures" / "24.11"
# Where each check puts a key no type names, one object down from the top: the schema must be closed there too.
NESTED_OBJECT = {
    "plan": ("resources",),
    "submit": ("runs", 0, "stages", 0),
    "status": ("jobs", 0),
    "logs": ("batch_log",),
    "report": ("runs", 0, "series"),
    "grade": ("details", ..., "response_chars"),  # ...: the first key, whatever its name
    "doctor": ("checks", 0),
}


def at(data: Any, path: tuple) -> Any:
    for step in path:
        data = data[next(iter(data))] if step is ... else data[step]
    return data


def rejected(verb: str, data: Any) -> bool:
    try:
        json_schemas().validate(verb, data)
    except json_schemas().JsonOutputError:
        return True
    return False


def assert_valid_and_strict(verb: str, data: dict[str, Any]) -> None:
    """`data` validates, and each mutation of it fails: a key at the top and one in a nested object that no type
    names, and a top-level value of the wrong type."""
    assert_json_valid(verb, data)
    assert rejected(verb, {**data, "undocumented": 1}), f"{verb}: an unknown top-level key passed"
    nested = copy.deepcopy(data)
    at(nested, NESTED_OBJECT[verb])["undocumented"] = 1
    assert rejected(verb, nested), f"{verb}: an unknown key in {NESTED_OBJECT[verb]} passed"
    properties = json_schemas().verb_schemas()[verb]["properties"]
    scalar = next(key for key, field in properties.items() if field.get("type") in ("string", "boolean", "integer"))
    assert rejected(verb, {**data, scalar: {"wrong": "type"}}), f"{verb}: an object as {scalar} passed"


def verbs_with_json_flag() -> set[str]:
    """The verbs whose parser takes --json (every verb module's `build_parser`)."""
    found = set()
    for verb in VERBS:
        parser = importlib.import_module(verb_module(verb)).build_parser()
        if any("--json" in action.option_strings for action in parser.actions):
            found.add(verb)
    return found


def test_every_verb_with_json_has_a_schema_from_its_types():
    with_type = {verb for verb in VERBS if hasattr(importlib.import_module(verb_module(verb)), "JSON_OUTPUT")}
    assert verbs_with_json_flag() == with_type == set(json_schemas().verb_schemas())
    assert set(NESTED_OBJECT) == with_type  # each is checked below


def test_every_object_with_keys_is_closed_and_the_schemas_are_valid():
    import jsonschema

    for verb, schema in json_schemas().verb_schemas().items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["title"] == f"beam-slurm {verb} --json" and schema["description"]
        objects = [schema, *schema.get("$defs", {}).values()]
        assert all(o.get("additionalProperties") is False for o in objects if "properties" in o), verb
        assert all(o.get("description") for o in objects), f"{verb}: a type without a docstring"


def test_the_page_links_each_schema_file(tmp_path):
    json_schemas().json_output_page(tmp_path)
    page = (tmp_path / "json-output.md").read_text()
    for verb, schema in json_schemas().verb_schemas().items():
        assert f"](json/{verb}.schema.json)" in page and f"## {verb} {{#{verb}}}" in page
        assert json.loads((tmp_path / "json" / f"{verb}.schema.json").read_text()) == schema
    assert "| `attempts` | list of [AttemptJson](#status-attemptjson) |" in page
    assert "### AttemptJson {#status-attemptjson}" in page


def test_a_message_names_the_place_and_why():
    with pytest.raises(json_schemas().JsonOutputError, match=r"\$\.checks\[0\]\.verdict: 'fine' is not one of"):
        json_schemas().validate(
            "doctor",
            {
                "slurm_version": "24.11.5",
                "partition": "low",
                "profile_written": None,
                "unanswered": [],
                "checks": [{"name": "kill_wait", "value": "30 sec", "verdict": "fine", "meaning": "", "fix": ""}],
            },
        )


def test_plan(capsys):
    assert_valid_and_strict("plan", read_json(["plan", "recipe=bf16_64gpu", *PATHS, "--json"], capsys))


def test_submit_dry_run_sweep(run_env, capsys):
    _, data = run_env
    answer = read_json(
        ["submit", "-m", "--dry-run", "--json", "trainer.backend=rehearsal", "lora.rank=16,64", *data], capsys
    )
    assert_valid_and_strict("submit", answer)


def test_status_of_a_run(tmp_path, capsys):
    export = _run(tmp_path, "typed", ["trainer.backend=rehearsal"])
    assert_valid_and_strict("status", read_json(["status", str(export), "--json"], capsys))


def test_status_of_a_sweep_keys_goodput_by_run(tmp_path, capsys):
    one, two = _run(tmp_path, "one", []), _run(tmp_path, "two", ["trainer.backend=rehearsal"])
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(
        json.dumps(
            {
                "runs": [
                    {"export_path": str(one), "choices": ["lora.rank=8"]},
                    {"export_path": str(two), "choices": ["lora.rank=16"]},
                ]
            }
        )
    )
    answer = read_json(["status", str(sweep), "--json"], capsys)
    assert set(answer["goodput"]) == {"one", "two"}
    assert_json_valid("status", answer)


def test_status_attempts_and_an_in_job_restart():
    """A training job's attempts as `status_json` nests them: an ended one, an in-job restart with its phases."""
    record = RunRecord()
    record.begin_attempt(
        job_id="41",
        attempt=0,
        nodes=["n1", "n2"],
        checkpoint=None,
        when="2026-12-01T10:00:00+0000",
        partition="batch",
        nodes_needed=2,
        user_exclude=[],
    )
    record.end_attempt(
        job_id="41",
        attempt=0,
        when="2026-12-01T10:20:00+0000",
        end={"end_kind": "notice", "saved_step": 12, "checkpoint_at_end": 12, "end_reason": "time limit"},
        bad_nodes=[],
        outcome=None,
        outcome_reason="",
        resumable_end=False,
        wanted_handled=False,
    )
    attempts = record.train_jobs["41"].attempts
    restarted = copy.deepcopy(attempts[0])
    restarted.in_job, restarted.end, restarted.start_time = 1, None, 100.5
    restarted.restart = {"warm": True, "why": "warm", "fault_at": 100.0, "decided_at": 100.5, "stopped_at": 102.0}
    phases = restart_phases(restarted, [{"attempt": "0.1", "phase": "step", "step": 13, "t": 107.0}])
    row = StatusRow(
        "r",
        "train",
        "41",
        "RUNNING",
        0,
        "20:00",
        "n1,n2",
        "12/20",
        "",
        "",
        step=12,
        max_steps=20,
        attempts=[*attempts, restarted],
        restarts_by_label={"0.1": phases},
    )
    jobs = json.loads(json.dumps(status_json([row], "run r")))
    assert jobs["jobs"][0]["attempts"][1]["restart"]["warm"] is True
    assert_json_valid("status", {**jobs, "goodput": goodput_json(Ledger()), "unanswered": ["slurmdbd"]})


def test_logs(tmp_path, capsys):
    export = _run(tmp_path, "logged", [])
    RunStore(export).update(
        lambda run: run.begin_attempt(
            job_id="77",
            attempt=0,
            nodes=["n1"],
            checkpoint=None,
            when="2026-12-01T10:00:00+0000",
            partition="batch",
            nodes_needed=1,
            user_exclude=[],
        )
    )
    attempt = export / "logs" / "77-0"
    (attempt / "ray" / "n1" / "logs").mkdir(parents=True)
    (attempt / "train_job.log").write_text("started\n")
    (attempt / "ray" / "n1" / "logs" / "raylet.out").write_text("raylet\n")
    (attempt / "ray" / "n1" / "COPY.json").write_text(json.dumps({"reason": "end", "time": 1.0, "bytes": 7}))
    assert_valid_and_strict("logs", read_json(["logs", str(export), "--json"], capsys))


def test_report_with_skyrl_evaluations_and_numbers_that_are_not(tmp_path, capsys):
    export = tmp_path / "exports" / "beam-lora-16"
    grades = _graded({"aime2024": [2, 1, 0], "aime2025": [4, 2, 1]})
    write_results(evaluation_dir(export, 5), grades, compute_metrics(grades), extra={"step": 5})
    _skyrl_dump(export, 5, "aime2024", positives=60, total=240)
    # SkyRL writes NaN where a dataset had no score; a metric may be infinite: null in the JSON.
    (export / "dumped_evals" / "global_step_5_evals" / "aggregated_results.jsonl").write_text(
        '{"eval/aime2025/avg_score": NaN}\n'
    )
    (export / TRAIN_METRICS_FILE).write_text(
        '{"step": 5, "reward/avg_raw_reward": 0.2}\n'
        '{"step": 6, "reward/avg_raw_reward": NaN, "generate/avg_num_tokens": 9}\n'
    )
    answer = read_json(["report", str(export), "--json"], capsys)
    (run,) = answer["runs"]
    assert None in [e["accuracy"] for e in run["evaluations"]] and run["series"]["reward"][1] == [6, None]
    assert_valid_and_strict("report", answer)


def test_report_with_a_ledger(tmp_path, capsys):
    export = _run(tmp_path, "reported", [])
    answer = read_json(["report", str(export), "--json"], capsys)
    assert answer["runs"][0]["goodput"] is not None
    assert_json_valid("report", answer)


def test_grade(tmp_path, capsys):
    responses = _write_jsonl(tmp_path / "r.jsonl", _responses({"aime2024": [4, 2, 0], "aime2025": [1, 1, 1]}, k=3))
    answer = read_json(
        ["grade", "--responses", str(responses), "--out", str(tmp_path / "graded"), "--json", "grade.workers=1"], capsys
    )
    assert {"pass@1", "pass@2", "pass@3"} <= set(answer["metrics"]["aime2024"])  # pass@k for a k of 3 too
    assert_valid_and_strict("grade", answer)
    wrong = copy.deepcopy(answer)
    wrong["metrics"]["aime2024"]["pass@2"] = "0.5"
    assert rejected("grade", wrong)


@pytest.fixture
def recorded_site(monkeypatch, tmp_path):
    """A TEST DOUBLE of `site.read`: Slurm 24.11's answers as recorded (as in test_doctor.py)."""
    for name in ("BEAM_SLURM_CLUSTER", "SBATCH_PARTITION", "CKPT_PATH", "EXPORT_PATH", "RUN_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BEAM_SLURM_CONFIG_DIR", str(tmp_path / "config"))
    recorded = {
        name: (FIXTURES / f"{name}.txt").read_text()
        for name in ("show_config", "show_partition", "show_partition_nonotice", "show_node", "show_qos", "version")
    }
    monkeypatch.setattr(
        site,
        "read",
        lambda partition, paths=(): site.from_outputs(
            config=recorded["show_config"],
            partitions=recorded["show_partition"] + recorded["show_partition_nonotice"],
            nodes=recorded["show_node"],
            qos=recorded["show_qos"],
            partition=partition,
            client_version=recorded["version"],
        ),
    )


@pytest.mark.usefixtures("recorded_site")
def test_doctor(capsys):
    assert_valid_and_strict(
        "doctor", read_json(["doctor", "--json", "recipe=lora_16gpu", "cluster.partition=low"], capsys)
    )
