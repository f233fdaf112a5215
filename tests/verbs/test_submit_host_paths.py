"""`plan` and `submit` check on the submit host the paths the job will read, unless the site turns that off."""

import os
import subprocess
import sys

import pytest
from job_inputs import DAPO_MODULE_FILE, DATA_FILES, make_job_inputs, path_overrides

from beam_slurm.config.load import load_config
from beam_slurm.config.validation import path_problems
from beam_slurm.core.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("MODEL_PATH", "DATA_DIR", "SKYRL_DIR", "RESUME_MODE", "MAX_TRAINING_STEPS", "CKPT_INTERVAL",
                "KV_CACHE_DTYPE", "RUN_NAME", "OPTIMIZER_STATE_DISK_DIR", "BEAM_TRAINER_BACKEND"):
        monkeypatch.delenv(var, raising=False)


def checked(overrides: list[str]) -> list:
    with pytest.raises(ConfigError) as err:
        load_config(["recipe=lora_16gpu", *overrides], check_paths=True)
    return err.value.problems


def test_complete_inputs_pass(tmp_path):
    cfg = load_config(["recipe=lora_16gpu", *path_overrides(make_job_inputs(tmp_path))], check_paths=True)
    assert path_problems(cfg) == []


def test_missing_model_from_the_environment_names_the_variable_and_the_switch(tmp_path, monkeypatch):
    paths = make_job_inputs(tmp_path)
    monkeypatch.setenv("MODEL_PATH", str(tmp_path / "no-model"))
    (problem,) = checked(path_overrides({k: v for k, v in paths.items() if k != "model_path"}))
    message = str(problem)
    assert message.startswith(f"paths.model_path (from MODEL_PATH)='{tmp_path}/no-model': does not exist on ")
    assert "cluster.check_paths_on_submit=false" in message


def test_each_missing_input_is_named(tmp_path):
    paths = make_job_inputs(tmp_path)
    (paths["skyrl_dir"] / DAPO_MODULE_FILE).unlink()
    (paths["data_dir"] / DATA_FILES[1]).unlink()
    problems = checked([*path_overrides(paths), "checkpoint.resume_mode=from_path",
                        f"checkpoint.resume_path={tmp_path}/ck/global_step_5"])
    assert [p.key for p in problems] == ["paths.skyrl_dir", "paths.eval_files", "checkpoint.resume_path"]
    assert "not a SkyRL checkout" in problems[0].fix and problems[1].value == str(paths["data_dir"] / DATA_FILES[1])


def test_a_missing_data_folder_is_one_problem(tmp_path):
    paths = make_job_inputs(tmp_path)
    paths["data_dir"] = tmp_path / "nowhere"
    (problem,) = checked(path_overrides(paths))
    assert problem.key == "paths.data_dir" and "prepare-data" in problem.fix


def test_a_file_where_the_model_folder_belongs(tmp_path):
    paths = make_job_inputs(tmp_path)
    paths["model_path"] = tmp_path / "weights.bin"
    paths["model_path"].write_bytes(b"")
    (problem,) = checked(path_overrides(paths))
    assert problem.key == "paths.model_path" and "not a directory" in problem.fix


def test_data_written_by_an_earlier_stage_is_not_required(tmp_path):
    paths = make_job_inputs(tmp_path)
    paths["data_dir"] = tmp_path / "data-to-come"
    cfg = load_config(["recipe=lora_16gpu", *path_overrides(paths)])
    assert path_problems(cfg, produced=["data"]) == []
    assert [p.key for p in path_problems(cfg)] == ["paths.data_dir"]


def test_rehearsal_needs_no_skyrl_checkout(tmp_path):
    paths = make_job_inputs(tmp_path)
    paths["skyrl_dir"] = tmp_path / "no-skyrl"
    load_config(["recipe=lora_16gpu", "trainer.backend=rehearsal", *path_overrides(paths)], check_paths=True)


def test_sites_without_compute_storage_on_login_nodes_turn_the_check_off(tmp_path):
    cfg = load_config(["recipe=lora_16gpu", "cluster.check_paths_on_submit=false", f"paths.model_path={tmp_path}/x",
                       f"paths.data_dir={tmp_path}/y", f"paths.skyrl_dir={tmp_path}/z"], check_paths=True)
    assert path_problems(cfg) == []


def test_plan_refuses_a_missing_model_with_exit_2(tmp_path):
    paths = make_job_inputs(tmp_path)
    env = {**os.environ, "MODEL_PATH": str(tmp_path / "gone")}
    out = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "plan", "recipe=lora_16gpu",
                          f"paths.data_dir={paths['data_dir']}", f"paths.skyrl_dir={paths['skyrl_dir']}"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2 and out.stdout == ""
    assert "paths.model_path (from MODEL_PATH)=" in out.stderr and "does not exist" in out.stderr


def test_submit_refuses_a_missing_model_before_anything_is_queued(tmp_path, monkeypatch, capsys):
    from beam_slurm.verbs import submit as submit_mod

    paths = make_job_inputs(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MODEL_PATH", str(tmp_path / "gone"))
    argv = ["--stages", "train", "--dry-run", "recipe=lora_16gpu", f"paths.data_dir={paths['data_dir']}",
            f"paths.skyrl_dir={paths['skyrl_dir']}"]
    assert submit_mod.main(argv) == 2
    err = capsys.readouterr().err
    assert "paths.model_path (from MODEL_PATH)=" in err and "nothing was submitted" in err
    monkeypatch.setenv("MODEL_PATH", str(paths["model_path"]))
    assert submit_mod.main(argv) == 0, capsys.readouterr().err
