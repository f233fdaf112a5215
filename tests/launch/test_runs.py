"""The run record the training job writes, the one resolver for RUN, and what status and submit make of a record.

No Slurm here: the record is written through the same functions the batch shell calls, and status is asked for its
rows of the recorded attempts (the live states come from the sandbox tests in tests/training)."""
from __future__ import annotations

import pytest

from beam_slurm.core.run_store import RunStore, now, remember_job
from beam_slurm.launch import runs
from beam_slurm.verbs.status import StatusInputError, _attempt_row, resolve_targets


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("XDG_STATE_HOME", "BEAM_EXPORTS_ROOT", "EXPORT_PATH", "RUN_NAME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def started(export, job="501", attempt=0, checkpoint=None, nodes=("n1", "n2")):
    def begin(run):
        run.fill_in({"run_name": "beam_lora_16gpu", "recipe": "lora_16gpu", "export_path": str(export)})
        return run.begin_attempt(job_id=job, attempt=attempt, nodes=list(nodes), checkpoint=checkpoint, when=now(),
                                 partition="batch", nodes_needed=2, user_exclude=["n9"])

    return RunStore(export).update(begin)


def ended(export, job="501", attempt=0, **end):
    RunStore(export).update(lambda run: run.end_attempt(
        job_id=job, attempt=attempt, when=now(), end=end, bad_nodes=end.pop("bad", []),
        outcome=end.pop("outcome", None), outcome_reason=end.pop("outcome_reason", ""),
        resumable_end=end.pop("resumable", False), wanted_handled=end.pop("handled", False)))


def test_a_job_started_with_sbatch_writes_a_record_every_verb_resolves(home, tmp_path):
    export = home / "exports" / "beam_lora_16gpu"
    job, bad_nodes = started(export)
    assert job.started_by == "sbatch" and bad_nodes == []
    remember_job("501", export)
    assert runs.resolve_run(str(export)) == export
    assert runs.resolve_run(str(export / "beam_run")) == export
    assert runs.resolve_run(str(export / "beam_run" / "run.json")) == export
    assert runs.resolve_run("beam_lora_16gpu") == export  # under $HOME/exports
    assert runs.resolve_run("501") == export  # the job index
    (home / ".local" / "state" / "beam-slurm" / "jobs" / "501").unlink()
    assert runs.resolve_run("501") == export  # found by scanning the exports root
    shown, title = resolve_targets(str(export))
    assert list(shown) == [export] and title == "run beam_lora_16gpu"
    with pytest.raises(runs.RunNotFound, match="no run knows job 777"):
        runs.resolve_run("777")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StatusInputError, match="neither a run folder"):
        resolve_targets(str(tmp_path / "plain"))


def test_attempts_bad_nodes_and_a_lost_attempt_are_recorded(home):
    export = home / "exports" / "r"
    started(export, checkpoint=None)
    ended(export, end_kind="node-failure", end_reason="infrastructure failure", checkpoint_at_end=None,
          counts_against_progress=True, bad=[("n2", "node n2: this node's Ray (raylet) died")])
    started(export, attempt=1, checkpoint=None, nodes=("n1", "n3"))
    # attempt 1's batch host dies: attempt 2 closes it as lost (no newer checkpoint: it counts)
    job, bad_nodes = started(export, attempt=2, checkpoint=None, nodes=("n3", "n4"))
    attempts = job.attempts
    assert [a.end_kind for a in attempts[:2]] == ["node-failure", "lost"]
    assert attempts[1].counts_against_progress is True and attempts[2].end is None
    assert bad_nodes == ["n2"]
    record = RunStore(export).read()
    assert record.bad_nodes[0].reason.endswith("raylet) died") and record.run_name == "beam_lora_16gpu"
    assert record.train_jobs["501"].user_exclude == ["n9"]


def test_bad_nodes_hold_for_the_job_that_found_them_not_for_a_later_job_of_the_run(home):
    export = home / "exports" / "r"
    started(export, job="601")
    ended(export, job="601", end_kind="node-failure", end_reason="infrastructure failure",
          bad=[("n2", "node n2: this node's Ray (raylet) died")])
    assert started(export, job="601", attempt=1)[1] == ["n2"]
    # A new submission of the same run (another job) starts with every node; the record still lists n2 for status.
    assert started(export, job="602")[1] == []
    ended(export, job="602", end_kind="node-failure", end_reason="infrastructure failure",
          bad=[("n2", "node n2: never joined")])
    assert [(b.node, b.job_id) for b in RunStore(export).read().bad_nodes] == [("n2", "601"), ("n2", "602")]
    assert RunStore(export).read().bad_node_names() == ["n2"]


def test_the_wanted_outcome_is_handled_once_and_a_stopped_run_is_resumable(home):
    export = home / "exports" / "r"
    started(export, checkpoint=3)
    wanted = runs.set_wanted(RunStore(export), job_id="501", action="stop", timeout_s=30)
    assert RunStore(export).read().wanted_for("501") == wanted
    assert RunStore(export).read().wanted_for("502") is None
    ended(export, end_kind="stopped", end_reason="stopped by the operator at step 5", saved_step=5,
          checkpoint_at_end=5, outcome="stopped", outcome_reason="stopped at step 5, resumable", resumable=True,
          handled=True)
    record = RunStore(export).read()
    assert record.wanted.handled_by_attempt == 0 and record.wanted_for("501") is None
    assert record.resumable_job().job_id == "501"
    row = _attempt_row("r", record.train_jobs["501"].attempts[0])
    assert (row.state, row.checkpoint) == ("stopped", "3 -> 5")
    assert row.reason.startswith("saved at step 5; stopped by the operator")


def test_submit_resumes_a_stopped_run(run_env, capsys):
    from beam_slurm.verbs.submit import build_runs, resume_stopped

    root, _ = run_env
    spec = build_runs(["recipe=lora_16gpu"], multirun=False, stages=["train"])[0]
    export, ckpt = spec.cfg.paths.export_path, spec.cfg.paths.ckpt_path
    resume_stopped([spec])
    assert "checkpoint.resume_mode=latest" not in spec.overrides, "nothing recorded: no resume"
    started(export, checkpoint=None)
    ended(export, end_kind="stopped", end_reason="stopped", checkpoint_at_end=4, outcome="stopped",
          outcome_reason="stopped at step 4, resumable", resumable=True)
    import pathlib

    pathlib.Path(ckpt).mkdir(parents=True)
    (pathlib.Path(ckpt) / "latest_ckpt_global_step.txt").write_text("4\n")
    resume_stopped([spec])
    assert spec.overrides[-2:] == ["checkpoint.resume_mode=latest", "checkpoint.resume_path=null"]
    assert "resumes from step 4" in capsys.readouterr().out
    chosen = build_runs(["recipe=lora_16gpu", "checkpoint.resume_mode=none"], multirun=False, stages=["train"])[0]
    resume_stopped([chosen])
    assert "checkpoint.resume_mode=latest" not in chosen.overrides, "the user's own resume mode wins"
