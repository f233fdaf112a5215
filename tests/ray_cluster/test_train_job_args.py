"""train_job argument handling and preflight checks that run without a cluster."""
from __future__ import annotations

import json

from beam_slurm.slurm import train_job
from beam_slurm.slurm.preflight import PreflightSettings, check_node, collect_results


def test_driver_must_follow_double_dash(capsys):
    assert train_job.main(["python", "x.py"]) == 2
    assert "train.driver" in capsys.readouterr().err


def test_relative_checkpoint_path_is_rejected_before_anything_runs(capsys, monkeypatch):
    monkeypatch.delenv("CKPT_PATH", raising=False)
    assert train_job.main(["--ckpt-path", "rel/ckpt", "--", "python", "x.py"]) == 2
    assert "train.ckpt_path" in capsys.readouterr().err


def test_options_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("CKPT_PATH", "/shared/ckpt")
    monkeypatch.setenv("MODEL_PATH", "/shared/model")
    monkeypatch.setenv("BEAM_MAX_REQUEUES", "5")
    monkeypatch.setenv("BEAM_RAY_SETTINGS", json.dumps({"network_interface": "ib0"}))
    settings = train_job.parse_args(["--grace-s", "60", "--", "python", "-m", "x"])
    assert settings.driver == ["python", "-m", "x"]
    assert settings.ckpt_path == "/shared/ckpt" and settings.log_dir == "/shared/logs"
    assert settings.max_requeues == 5 and settings.grace_s == 60
    assert settings.preflight_checks.readable_paths == ["/shared/model"]
    assert settings.ray.network_interface == "ib0"
    assert settings.problems() == []


def test_preflight_names_each_problem(tmp_path):
    problems = check_node(PreflightSettings(readable_paths=[str(tmp_path / "missing")], skyrl_dir=str(tmp_path),
                                            host_ram_need_bytes=1 << 60, gpus_per_node=8,
                                            shared_canary=str(tmp_path / "canary")),
                          environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    text = "\n".join(problems)
    assert "missing does not exist" in text and "lacks pyproject.toml, examples" in text
    assert "CPU optimizer needs" in text and "step sees 2 GPUs" in text and "not on storage shared" in text
    assert check_node(PreflightSettings(readable_paths=[str(tmp_path)], scratch_dir=str(tmp_path / "s"))) == []


def test_preflight_results_name_silent_nodes():
    out = 'noise\nBEAM_PREFLIGHT {"host": "n1", "problems": []}\nBEAM_PREFLIGHT {"host": "n2", "problems": ["x"]}\n'
    assert collect_results(out, ["n1", "n2", "n3"]) == {"n2": ["x"], "n3": [
        "preflight did not report (the task failed to start or crashed)"]}
