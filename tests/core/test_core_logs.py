"""`beam_slurm.core.logs`: an entry's lines in its own format on its stream and in its file, and nothing left behind
once it ends (pytest's caplog and the next entry see the package's loggers as they were)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from beam_slurm.core import logs
from beam_slurm.jobs.training import storage_probe

PACKAGE = logging.getLogger("beam_slurm")


def state(logger: logging.Logger = PACKAGE) -> tuple:
    return list(logger.handlers), logger.level, logger.propagate, logger.disabled


def test_lines_are_prefix_and_message_on_the_stream_and_in_the_file(tmp_path, capsys):
    log_file = tmp_path / "train_job.log"
    log_file.write_text("earlier\n")
    with logs.installed("beam_slurm.jobs", lambda: "[beam-slurm train 10:00:00 job 7 attempt 0] ", log_file):
        storage_probe.check_budget({"n1": 2.0}, save_bytes_per_node=0, save_window_s=1)
        logging.getLogger("beam_slurm.jobs.training.attempt").warning("warning: 50% of the ports")
    line = "[beam-slurm train 10:00:00 job 7 attempt 0] storage writes 2.00 GB/s per node at the slowest (n1), 2.00 at"
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(line) and err.endswith("[beam-slurm train 10:00:00 job 7 attempt 0] warning: 50% of the ports\n")
    assert log_file.read_text() == "earlier\n" + err  # appended, the same lines, no level nor logger name


def test_stdout_a_fixed_prefix_and_only_the_loggers_named(capsys):
    with logs.installed(("beam_slurm.launch", "beam_slurm.verbs.train"), "[beam-slurm train] ", stream="stdout"):
        logging.getLogger("beam_slurm.launch.chain").info("eval-chain: global_step_5 -> evaluation job 12")
        logging.getLogger("beam_slurm.verbs.train").info("eval-chain: last pass failed: boom")
        logging.getLogger("beam_slurm.jobs.training.attempt").info("not the chain's")
        logging.getLogger("beam_slurm.launch.chain").debug("below INFO")
    assert capsys.readouterr() == (
        "[beam-slurm train] eval-chain: global_step_5 -> evaluation job 12\n"
        "[beam-slurm train] eval-chain: last pass failed: boom\n",
        "",
    )


def test_the_handler_and_the_level_go_when_the_entry_ends_even_on_an_error(tmp_path, capsys):
    before = state()
    with pytest.raises(RuntimeError), logs.installed("beam_slurm", "pull-container: ", tmp_path / "a.log"):
        assert len(PACKAGE.handlers) == len(before[0]) + 1 and PACKAGE.isEnabledFor(logging.INFO)
        raise RuntimeError("the entry failed")
    assert state() == before
    logging.getLogger("beam_slurm.jobs.container_pull").warning("after the entry")
    assert "pull-container: " not in capsys.readouterr().err and (tmp_path / "a.log").read_text() == ""


def test_the_same_entry_inside_itself_writes_each_line_once(capsys):
    with logs.installed("beam_slurm", stream="stdout"), logs.installed("beam_slurm", stream="stdout"):
        logging.getLogger("beam_slurm.launch.eval_array").info("evaluate: results in /x")
    assert capsys.readouterr().out == "evaluate: results in /x\n"
    assert not [h for h in PACKAGE.handlers if isinstance(h, logs.LineHandler)]


def test_caplog_sees_the_lines_during_and_after_an_entry(caplog, capsys):
    caplog.set_level(logging.INFO)
    with logs.installed("beam_slurm", "[ray-node n1 rank 0 +  0.1s] "):
        logging.getLogger("beam_slurm.jobs.ray_cluster.head").info("during")
    logging.getLogger("beam_slurm.jobs.ray_cluster.head").info("after")
    assert caplog.messages == ["during", "after"]  # propagation untouched, no handler or level left behind
    assert capsys.readouterr().err == "[ray-node n1 rank 0 +  0.1s] during\n"
    assert PACKAGE.propagate and not PACKAGE.disabled


def test_log_lines_collects_after_an_entry_ran(log_lines):
    with logs.installed("beam_slurm.jobs", "[beam callback] "):
        logging.getLogger("beam_slurm.jobs.training.entrypoint").info("save requested")
    storage_probe.check_budget({"n2": 0.5}, save_bytes_per_node=0, save_window_s=1)
    assert log_lines[0] == "save requested" and log_lines[1].startswith("storage writes 0.50 GB/s")


def test_a_module_that_runs_as_main_logs_under_its_package_name():
    # Under `python -m beam_slurm.jobs.ray_cluster.node` __name__ is "__main__": no entry's handler would see its lines.
    package = Path(logs.__file__).parents[1]
    runnable = [p for p in package.rglob("*.py") if 'if __name__ == "__main__":' in p.read_text()]
    assert runnable and not [str(p) for p in runnable if "logging.getLogger(__name__)" in p.read_text()]
