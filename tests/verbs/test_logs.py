"""`beam-slurm logs`: the batch log found from the path the job was submitted with, Slurm's filename patterns, empty
files and colour codes, `--lines`. No Slurm here (scontrol and sacct fail at once, as for a job Slurm has forgotten
on a cluster without accounting): the run record is written through the store, the logs are files in its folder."""

from __future__ import annotations

import shlex

import pytest
from scheduler_double import ScriptedJob

from beam_slurm.cli import main as beam_slurm
from beam_slurm.core.run_record import StageEntry, Submission
from beam_slurm.core.run_store import RunStore, now, remember_job
from beam_slurm.launch.runs import find_job
from beam_slurm.verbs import logs

FIELDS = {"j": "12", "A": "10", "a": "2", "x": "beam_lora", "u": "alice", "N": "n3"}


@pytest.mark.parametrize("pattern, expanded", [
    ("%x-%j.out", "beam_lora-12.out"), ("logs/train-%j.out", "logs/train-12.out"), ("slurm-%A_%a.out", "slurm-10_2.out"),
    ("%u/%N-%4j.log", "alice/n3-0012.log"), ("100%%-%j", "100%-12"), ("keep\\%j", "keep%j"), ("odd-%Z-%j", "odd-%Z-12"),
])
def test_output_patterns_expand_as_slurm_does(pattern, expanded):
    assert logs.expand_output(pattern, FIELDS) == expanded


def test_pattern_fields_from_scontrol_and_from_sacct():
    assert logs.pattern_fields("7", {"JobName": "r", "UserId": "bob(1000)", "BatchHost": "n2", "source": "scontrol"}) == {
        "j": "7", "A": "7", "a": logs.NO_ARRAY_TASK, "x": "r", "u": "bob", "N": "n2"}
    fields = logs.pattern_fields("15", {"JobID": "12_3", "User": "carol", "JobName": "", "source": "sacct"}, "fallback")
    assert (fields["A"], fields["a"], fields["u"], fields["x"]) == ("12", "3", "carol", "fallback")


def test_the_output_option_is_read_word_by_word():
    command = ("sbatch --parsable --dependency=afterok:1 --kill-on-invalid-dep=no --job-name=r "
               "'--output=/shared/my exports/logs/train-%j.out' /repo/sbatch/train_lora_16gpu.sh run_name=r")
    assert logs.sbatch_options(command)["output"] == "/shared/my exports/logs/train-%j.out"
    assert logs.sbatch_options(command)["job-name"] == "r"
    for written in ("-o out.txt", "-oout.txt", "--output out.txt", "--output=out.txt", "-J x -o out.txt"):
        assert logs.sbatch_options(f"sbatch {written} x.sh")["output"] == "out.txt", written
    assert "output" not in logs.sbatch_options("sbatch --nodes=2 x.sh") and logs.sbatch_options("sbatch 'x") == {}


def _run(tmp_path, *, started_by: str = "submit", stdout: str = ""):
    """A run whose training job 2 ran and ended: submitted by `submit` with --output under its export path (the
    command in the run record, or with started_by="commands.sh" only in commands.sh), or with plain sbatch; `stdout`:
    what the job recorded as its StdOut at its start."""
    export = tmp_path / "exports"
    argv = ["sbatch", "--parsable", "--dependency=afterok:1", "--kill-on-invalid-dep=no", "--job-name=beam_lora_16gpu",
            f"--output={export}/logs/train-%j.out", "/repo/sbatch/train_lora_16gpu.sh"]

    def change(run):
        run.run_name, run.export_path, run.log_dir = "beam_lora_16gpu", str(export), str(export / "logs")
        if started_by != "sbatch":
            run.submissions.append(Submission(submitted_at=now(), stages=[StageEntry(
                stage="train", status="submitted", job_id="2",
                command=shlex.join(argv) if started_by == "submit" else None)]))
        run.begin_attempt(job_id="2", attempt=0, nodes=["n1", "n2"], checkpoint=None, when=now(), partition="batch",
                          nodes_needed=2, user_exclude=[], stdout=stdout)

    store = RunStore(export)
    store.update(change)
    if started_by == "commands.sh":
        store.write_commands(["#!/bin/bash", "# data: reused", "# train: job 2", shlex.join(argv)])
    attempt = export / "logs" / "2-0"
    (attempt / "ray" / "n1" / "logs").mkdir(parents=True)
    (attempt / "train_job.log").write_text("".join(f"attempt line {i}\n" for i in range(100)))
    (attempt / "failure.json").write_text("")
    (attempt / "ray" / "n1" / "logs" / "raylet.out").write_text("\x1b[32mraylet started\x1b[0m\n")
    (attempt / "ray" / "n1" / "logs" / "dashboard.err").write_text("")
    return export


def test_a_finished_submitted_job_shows_its_batch_log_from_the_runs_command(tmp_path, capsys):
    export = _run(tmp_path)
    (export / "logs" / "train-2.out").write_text("".join(f"\x1b[1mbatch line {i}\x1b[0m\n" for i in range(50)))
    assert logs.batch_log(find_job(str(export))) == (export / "logs" / "train-2.out", "the run's sbatch command")
    assert beam_slurm(["logs", str(export), "--lines", "5"]) == 0
    out = capsys.readouterr().out
    assert f"== batch log of job 2: {export}/logs/train-2.out" in out and "batch line 49\n" in out
    assert "batch line 44" not in out and "\x1b[" not in out and "raylet.out" in out  # not a terminal: no colours
    assert "failure.json" not in out and "dashboard.err" not in out and "1 empty files not listed (--all" in out
    assert beam_slurm(["logs", str(export), "--all"]) == 0
    out = capsys.readouterr().out
    assert "failure.json" in out and "dashboard.err" in out and "attempt line 99" in out
    assert beam_slurm(["logs", str(export), "--follow"]) == 0  # the job ended: the whole log, then it returns
    out = capsys.readouterr().out
    assert out.count("batch line") == 50 and "\x1b[" not in out


def test_the_batch_log_from_commands_sh_from_the_record_of_an_sbatch_job_and_sbatchs_default(tmp_path):
    export = _run(tmp_path / "a", started_by="commands.sh")
    (export / "logs" / "train-2.out").write_text("x\n")
    assert logs.batch_log(find_job(str(export))) == (export / "logs" / "train-2.out", "the run's sbatch command")
    own = tmp_path / "b" / "work" / "beam_lora_16gpu-2.out"
    export = _run(tmp_path / "b", started_by="sbatch", stdout=str(own))
    own.parent.mkdir()
    own.write_text("x\n")
    assert logs.batch_log(find_job(str(export))) == (own, "the run record")
    # Slurm's own answers: sacct's submit line (relative to the working folder), then sbatch's default name.
    job = find_job(str(_run(tmp_path / "c", started_by="sbatch")))
    work = tmp_path / "c" / "work"
    facts = {"JobID": "2", "JobName": "t", "User": "u", "WorkDir": str(work), "source": "sacct",
             "SubmitLine": "sbatch --kill-on-invalid-dep=no -o out/%x-%j.log train.sh"}
    assert logs.batch_log_candidates(job, facts)[0] == (work / "out" / "t-2.log", "sacct SubmitLine")
    assert logs.batch_log_candidates(job, {**facts, "SubmitLine": "sbatch train.sh"})[0] == (
        work / "slurm-2.out", "sbatch's default")


def test_lines_is_checked_and_zero_lists_the_logs_only(tmp_path, capsys):
    export = _run(tmp_path)
    assert beam_slurm(["logs", str(export), "--lines", "-5"]) == 2
    assert "--lines -5" in capsys.readouterr().err
    assert beam_slurm(["logs", str(export), "--lines", "0"]) == 0
    out = capsys.readouterr().out
    assert "attempt line" not in out and "== train_job.log ==" in out and "raylet.out" in out
    assert "not written:" in out and "train-2.out (the run's sbatch command)" in out  # where it was looked for
    assert beam_slurm(["logs", str(export), "--follow"]) == 2  # ended, and its batch log was never written
    assert "cannot follow the batch log of job 2" in capsys.readouterr().err


def _pending(tmp_path, monkeypatch, states: list[str], at_lookup=None) -> ScriptedJob:
    """Job 5 of a run, submitted and still pending (no attempt has started: no log folder yet), named by its id."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(logs, "FOLLOW_POLL_S", 0.0)
    export = tmp_path / "exports"
    RunStore(export).update(lambda run: run.submissions.append(Submission(submitted_at=now(), stages=[
        StageEntry(stage="train", status="submitted", job_id="5")])))
    remember_job("5", export)
    return ScriptedJob("5", export / "logs" / "train-5.out", states, dict(at_lookup or {})).install(monkeypatch)


def test_follow_of_a_pending_job_waits_for_its_first_line(tmp_path, monkeypatch, capsys):
    def starts():
        job.stdout.parent.mkdir(parents=True)
        job.stdout.write_text("first line\n")

    job = _pending(tmp_path, monkeypatch, ["PENDING", "PENDING", "PENDING", "RUNNING", ""],
                   at_lookup={4: starts, 5: lambda: job.stdout.write_text("first line\nlast line\n")})
    assert beam_slurm(["logs", "5", "--follow"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "first line\nlast line\n"
    assert captured.err == (f"beam-slurm logs: job 5 is pending; waiting for it to start and write {job.stdout} "
                            "(Ctrl-C to stop)\n")  # said once, however long it waits


def test_follow_of_a_pending_job_ends_at_ctrl_c_with_0(tmp_path, monkeypatch, capsys):
    def ctrl_c():
        raise KeyboardInterrupt

    job = _pending(tmp_path, monkeypatch, ["PENDING"], at_lookup={3: ctrl_c})
    assert beam_slurm(["logs", "5", "--follow"]) == 0
    assert "job 5 is pending" in capsys.readouterr().err and job.lookups == 3


def test_follow_of_a_job_that_ends_without_output_is_status_1(tmp_path, monkeypatch, capsys):
    job = _pending(tmp_path, monkeypatch, ["PENDING", "PENDING", ""])
    assert beam_slurm(["logs", "5", "--follow"]) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"beam-slurm logs: job 5 ended without writing anything to {job.stdout}\n"), err


def _no_controller() -> Exception:
    from beam_slurm.slurm import outage, scheduler

    return scheduler.SlurmUnreachable(
        "squeue failed (1): slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
        outage.CONTROLLER)


def test_follow_goes_on_through_a_controller_outage_and_says_so_once(tmp_path, monkeypatch, capsys):
    """squeue failing while the job runs: the log is followed on (it still grows), the outage said once; the job's
    end, once the controller answers again, ends the follow."""

    def writes(text):
        return lambda: job.stdout.write_text(job.stdout.read_text() + text)

    job = _pending(tmp_path, monkeypatch, ["RUNNING", _no_controller(), _no_controller(), ""],
                   at_lookup={1: lambda: (job.stdout.parent.mkdir(parents=True), job.stdout.write_text("a\n")),
                              3: writes("b\n"), 4: writes("c\n")})
    assert beam_slurm(["logs", "5", "--follow"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "a\nb\nc\n"
    assert captured.err.count("Slurm's controller (slurmctld) did not answer") == 1, captured.err
    assert "following on until it answers" in captured.err and "Traceback" not in captured.err


def test_follow_does_not_start_without_the_controller(tmp_path, monkeypatch, capsys):
    _pending(tmp_path, monkeypatch, [_no_controller()])
    assert beam_slurm(["logs", "5", "--follow"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("beam-slurm logs: cannot follow job 5: could not ask whether it runs: Slurm's controller")
