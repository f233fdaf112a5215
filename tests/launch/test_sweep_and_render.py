"""Sweep expansion, per-point names and paths, validation before submission, rendered sbatch commands, skip logic.

No scheduler needed: everything here stops before sbatch (rendering, --dry-run, refusals)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from pipeline_inputs import IMAGE, fake_runtime_bin

from beam_slurm.config.load import load_config
from beam_slurm.core.layout import latest_checkpoint_step
from beam_slurm.launch.stages import PrepareData, PullContainer, Train
from beam_slurm.launch.sweep import expand, rename_run, slug
from beam_slurm.slurm.submission import SbatchRequest, submission_environment
from beam_slurm.verbs import submit as submit_mod

# --- sweep expansion ---------------------------------------------------------------------------------------------

def test_expand_is_the_cartesian_product_in_hydra_order():
    combos = expand(["recipe=lora_16gpu", "precision=bf16,mxfp8", "lora.rank=0,64"])
    assert [c.overrides for c in combos] == [
        ["recipe=lora_16gpu", "precision=bf16", "lora.rank=0"],
        ["recipe=lora_16gpu", "precision=bf16", "lora.rank=64"],
        ["recipe=lora_16gpu", "precision=mxfp8", "lora.rank=0"],
        ["recipe=lora_16gpu", "precision=mxfp8", "lora.rank=64"],
    ]
    assert combos[3].choices == [("precision", "mxfp8"), ("lora.rank", "64")]


def test_expand_understands_hydra_grammar_and_quoted_commas():
    combos = expand(["lora.rank=range(16,65,16)", "lora.alpha=choice(32,64)", "run_name='a,b'"])
    assert len(combos) == 8
    assert {c.choices[0][1] for c in combos} == {"16", "32", "48", "64"}
    assert all(c.overrides[-1] == "run_name='a,b'" for c in combos)  # quoted: one value, not a sweep


def test_no_sweep_is_one_combination():
    assert [c.overrides for c in expand(["precision=bf16"])] == [["precision=bf16"]]
    assert [c.overrides for c in expand([])] == [[]]


def test_slug_is_short_and_folder_safe_and_disambiguates():
    assert slug([("precision", "bf16"), ("lora.rank", "64")]) == "precision_bf16-rank_64"
    assert slug([("lora.rank", "8"), ("other.rank", "2")]) == "lora.rank_8-other.rank_2"
    assert slug([("trainer.extra_env.X", "a/b c")]) == "X_a_b_c"


def test_rename_run_derives_default_paths_and_nests_given_ones(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", "/h")
    for name in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR"):
        monkeypatch.delenv(name, raising=False)
    cfg = load_config(["recipe=lora_16gpu"], validate=False)
    rename_run(cfg, "rank_8", home="/h")
    assert (cfg.run_name, cfg.paths.ckpt_path, cfg.paths.export_path, cfg.paths.log_dir) == (
        "beam_lora_16gpu-rank_8", "/h/ckpts/beam_lora_16gpu-rank_8", "/h/exports/beam_lora_16gpu-rank_8",
        "/h/exports/beam_lora_16gpu-rank_8/logs")
    cfg = load_config(["recipe=lora_16gpu", "run_name=exp", "paths.ckpt_path=/c", "paths.export_path=/e"], validate=False)
    rename_run(cfg, "rank_8", home="/h")
    assert (cfg.run_name, cfg.paths.ckpt_path, cfg.paths.export_path, cfg.paths.log_dir) == (
        "exp-rank_8", "/c/exp-rank_8", "/e/exp-rank_8", "/e/exp-rank_8/logs")


# --- validation of every point before anything is submitted --------------------------------------------------------

SWEEP = ["-m", "recipe=lora_16gpu", "precision=bf16,mxfp8", "lora.rank=0,64"]


def test_invalid_point_refuses_the_whole_sweep_and_says_why(run_env, capsys):
    root, data = run_env
    assert submit_mod.main([*SWEEP, *data]) == 2
    err = capsys.readouterr().err
    assert "1 of 4 runs invalid" in err
    assert "precision=mxfp8 lora.rank=64" in err and "MXFP8 is a full-parameter recipe" in err
    assert "--skip-invalid" in err and "nothing was submitted" in err
    assert not (root / "home" / "exports").exists()


def test_skip_invalid_dry_run_lists_three_runs_with_their_own_paths(run_env, capsys):
    root, data = run_env
    assert submit_mod.main([*SWEEP, "--skip-invalid", "--dry-run", *data]) == 0
    out = capsys.readouterr().out
    runs = [line.split()[1] for line in out.splitlines() if line.startswith("run ")]
    assert runs == ["beam_lora_16gpu-precision_bf16-rank_0", "beam_lora_16gpu-precision_bf16-rank_64",
                    "beam_lora_16gpu-precision_mxfp8-rank_0"]
    for name in runs:
        assert f"paths.ckpt_path={root}/home/ckpts/{name}" in out and f"paths.export_path={root}/home/exports/{name}" in out
    # One data job serves every run (same data folder).
    assert out.count("prepare_data.sh") == 1 and out.count("shared with run") == 4
    assert "dry run: nothing submitted or written" in out
    assert not (root / "home" / "exports").exists()


def test_sweep_without_multirun_flag_is_refused(run_env, capsys):
    assert submit_mod.main(["precision=bf16,mxfp8"]) == 2
    assert "add -m" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--stages", "data,bogus"], "--stages"),
    (["data.out_dir=/x"], "paths.data_dir"),
    (["data.no_such_key=1"], "data.no_such_key='1': unknown key"),
    (["data.batch_rows=0"], "data.batch_rows=0: must be >= 1"),
    (["-m", "data.batch_rows=1,2"], "cannot be swept"),
    (["-m", "data.overwrite=true,false"], "data.overwrite is an old spelling, not accepted; use --force"),
    (["lora.rank=-1"], "lora.rank"),
    (["cluster.extra_sbatch_args=['--comment=a']", "no_such_key=1"], "no_such_key"),
])
def test_bad_input_exits_2_before_submission(run_env, capsys, argv, message):
    assert submit_mod.main(argv) == 2
    assert message in capsys.readouterr().err


def test_duplicate_points_are_invalid(run_env):
    runs = submit_mod.build_runs(["lora.rank=8,8"], multirun=True)
    assert any("same run name" in str(p) for r in runs for p in r.problems)


def test_composition_error_of_one_point_is_listed_not_raised(run_env):
    runs = submit_mod.build_runs(["recipe=lora_16gpu,no_such_recipe"], multirun=True)
    assert [bool(r.problems) for r in runs] == [False, True]
    assert "choose one of" in str(runs[1].problems[0])


# --- rendering ------------------------------------------------------------------------------------------------------

def test_train_command_carries_cluster_options_and_pinned_paths(run_env, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    cfg = load_config(["recipe=lora_32gpu", "cluster.partition=gpu", "cluster.account=proj", "cluster.qos=high",
                       "cluster.time_limit=2-00:00:00", "cluster.signal_before_s=600", "cluster.grace_s=500",
                       "cluster.extra_sbatch_args=['--exclusive=user','--reservation=r 1']", "cluster.mem_per_node=0",
                       "run_name=exp1", "generation.temperature=0.9"])
    plan = Train(cfg, ["recipe=lora_32gpu", "generation.temperature=0.9", "run_name=exp1"]).render()
    argv = plan.request.argv()
    assert argv[:3] == ["sbatch", "--parsable", f"--export=ALL,BEAM_SLURM_HOME={Path(__file__).resolve().parents[2]}"]
    for option in ("--nodes=4", "--gpus-per-node=8", "--time=2-00:00:00", "--signal=B:USR1@600", "--partition=gpu",
                   "--account=proj", "--qos=high", "--exclusive=user", "--reservation=r 1", "--mem=0",
                   "--job-name=exp1", f"--output={cfg.paths.log_dir}/train-%j.out"):
        assert option in argv
    script = argv.index(str(Path(__file__).resolve().parents[2] / "sbatch" / "train_lora_32gpu.sh"))
    assert argv[script + 1:] == ["generation.temperature=0.9", "run_name=exp1", f"paths.ckpt_path={cfg.paths.ckpt_path}",
                                 f"paths.export_path={cfg.paths.export_path}", f"paths.log_dir={cfg.paths.log_dir}"]
    assert shlex.split(plan.request.shell()) == argv  # shell-safe: the printed line is the same argv
    assert "hf_secret_value" not in plan.request.shell()


def test_train_overrides_reload_to_the_same_config(run_env):
    cfg = load_config(["recipe=bf16_64gpu", "max_training_steps=7"])
    args = Train(cfg, ["recipe=bf16_64gpu", "max_training_steps=7"]).script_args()
    again = load_config(["recipe=bf16_64gpu", *args])
    from beam_slurm.config.load import to_yaml

    assert to_yaml(again) == to_yaml(cfg)


def test_quoted_values_survive_rendering(run_env):
    tricky = "paths.optimizer_state_disk_dir='/scratch/a b/$USER'"
    cfg = load_config(["recipe=bf16_64gpu", tricky])
    request = Train(cfg, ["recipe=bf16_64gpu", tricky]).render().request
    assert tricky in request.argv() and shlex.split(request.shell()) == request.argv()


@pytest.mark.parametrize("tail", ["o'brien", "a b,c", "x${HOME}y", "back\\slash\\", "q'uo\\'te"])
def test_paths_from_the_environment_reach_the_job_exactly(run_env, monkeypatch, tail):
    """CKPT_PATH/EXPORT_PATH with a quote (or comma, space, `${`, backslash): the pinned overrides are rendered for
    Hydra's grammar, the job's own parser reads them back exactly, and submit's shared check finds nothing."""
    root, _ = run_env
    monkeypatch.setenv("CKPT_PATH", f"{root}/{tail}/ckpt")
    monkeypatch.setenv("EXPORT_PATH", f"{root}/{tail}/export")
    cfg = load_config(["recipe=lora_16gpu"], validate=False)
    stage = Train(cfg, ["recipe=lora_16gpu"])
    again = load_config(["recipe=lora_16gpu", *stage.script_args()], validate=False)
    assert (again.paths.ckpt_path, again.paths.export_path, again.paths.log_dir) == (
        f"{root}/{tail}/ckpt", f"{root}/{tail}/export", f"{root}/{tail}/export/logs")
    assert stage.passing_on_problems() == []


def test_a_value_the_job_would_read_differently_is_named_with_its_variable(run_env, monkeypatch):
    """The shared check itself: what the job's parser does not read back is refused, naming key and variable."""
    from beam_slurm.config.load import read_back_problems

    problems = read_back_problems(["recipe=lora_16gpu", "paths.ckpt_path=/a/b'c"], {"paths.ckpt_path": "/a/b'c"},
                                  {"paths.ckpt_path": "CKPT_PATH"})
    assert len(problems) == 1 and problems[0].key == "paths.ckpt_path" and problems[0].env == "CKPT_PATH"
    assert "set CKPT_PATH" in str(problems[0]), str(problems[0])
    problems = read_back_problems(["recipe=lora_16gpu", "paths.ckpt_path='/a/x'"], {"paths.ckpt_path": "/a/y"}, {})
    assert len(problems) == 1 and "'/a/x'" in str(problems[0])


def test_dependencies_and_arrays_render():
    request = SbatchRequest(script="/s.sh", options=["--nodes=1"], script_args=["a b"], dependency_ids=["11", "12"],
                            dependency_type="afterany", array="0-3%2")
    assert request.argv() == ["sbatch", "--parsable", "--dependency=afterany:11:12", "--kill-on-invalid-dep=no",
                              "--array=0-3%2", "--nodes=1", "/s.sh", "a b"]
    assert SbatchRequest(script="/s", export={"X": "a,b"}).problems()
    assert SbatchRequest(script="/s", dependency_type="after").problems()


def test_submission_environment_drops_the_enclosing_jobs_slurm_variables():
    env = submission_environment({"SLURM_JOB_ID": "5", "SLURM_MEM_PER_NODE": "100", "SLURM_CONF": "/c",
                                  "SBATCH_ACCOUNT": "a", "HOME": "/h"})
    assert env == {"SLURM_CONF": "/c", "SBATCH_ACCOUNT": "a", "HOME": "/h"}
    assert submission_environment({"SLURM_MEM_PER_NODE": "1"}) == {"SLURM_MEM_PER_NODE": "1"}  # not inside a job


def test_a_chained_evaluation_reads_back_the_runs_settings_and_its_extras_win(run_env, tmp_path):
    from beam_slurm.config.overrides import value_at
    from beam_slurm.config.verb_args import VerbUsageError
    from beam_slurm.jobs.evaluation.checkpoints import is_adapter
    from beam_slurm.launch.eval_array import launcher_parameters
    from beam_slurm.launch.eval_request import EVALUATE_KEYS, chained_overrides

    cfg = load_config(["recipe=lora_16gpu", "eval.responses_per_problem=4"])
    with pytest.raises(VerbUsageError, match="--limit is an old spelling, not accepted; use eval.limit=2"):
        chained_overrides(cfg, 10, ["--limit", "2"])
    job = load_config(chained_overrides(cfg, 10, ["eval.limit=2"]))
    params = launcher_parameters(job)
    assert params["nodes"] == 2 and params["name"] == "beam_lora_16gpu-eval-10"
    assert params["submitit_folder"] == f"{cfg.paths.log_dir}/eval-step10-%j"
    adapter, whole = tmp_path / "global_step_10" / "policy", tmp_path / "global_step_20" / "policy"
    for folder, name in ((adapter, "adapter_config.json"), (whole, "config.json")):
        folder.mkdir(parents=True)
        (folder / name).write_text("{}")
    assert cfg.is_lora and is_adapter(adapter.parent) and is_adapter(adapter) and not is_adapter(whole.parent)
    # The job reads back exactly the run's settings; the extra arguments come last and win.
    for key in EVALUATE_KEYS:
        if key != "eval.limit":
            assert value_at(job, key) == value_at(cfg, key), key
    assert job.eval.limit == 2 and job.rollout.tensor_parallel == 8 and job.rollout.pipeline_parallel == 2
    odd = load_config(["recipe=lora_16gpu", "generation.reasoning_effort='a b,c'", "eval.dtype=${oc.env:NOPE,x}"])
    assert odd.eval.dtype == "x"
    odd.eval.dtype = "${literal}"
    job = load_config(chained_overrides(odd, 10, ["eval.limit=3"]))
    assert (job.generation.reasoning_effort, job.eval.dtype, job.eval.limit) == ("a b,c", "${literal}", 3)
    assert not load_config(["recipe=bf16_64gpu"]).is_lora


# --- skip logic ---------------------------------------------------------------------------------------------------

def test_data_stage_complete_only_when_outputs_match_the_manifest(run_env):
    from beam_slurm.verbs.prepare_data import main as prepare_main

    root, data = run_env
    cfg = load_config(["recipe=lora_16gpu"])
    stage = PrepareData(cfg, data)
    assert stage.completed() == ""
    assert prepare_main([*data, f"data.out_dir={cfg.paths.data_dir}"]) == 0
    assert stage.completed().startswith("complete:")
    assert PrepareData(cfg, data, force=True).completed() == ""
    assert submit_mod.main(["--dry-run", *data, "data.overwrite=true"]) == 2  # the old spelling of --force
    assert PrepareData(cfg, data, force=True).render().request.script_args[0] == "--force"
    assert PrepareData(cfg, [*data, "data.aime2025_data_source=other"]).completed() == ""  # other settings
    out = Path(cfg.paths.data_dir) / "aime-2025-cleaned.parquet"
    out.write_bytes(out.read_bytes() + b"x")
    assert stage.completed() == ""  # changed since written


def test_container_stage_skip_logic(run_env, monkeypatch, tmp_path):
    from beam_slurm.jobs.container_pull import pull_image

    none = load_config(["recipe=lora_16gpu"])
    assert PullContainer(none).completed().startswith("not needed: container.runtime=none")
    local = load_config(["recipe=lora_16gpu", "container.runtime=pyxis", f"container.image={tmp_path}/img.sqsh"])
    assert "local file" in PullContainer(local).completed()
    cfg = load_config(["recipe=lora_16gpu", "container.runtime=pyxis", f"container.image={IMAGE}",
                       f"container.image_cache_dir={tmp_path}/cache"])
    assert PullContainer(cfg).completed() == ""
    args = PullContainer(cfg).render().request.script_args
    assert args == ["container.runtime=pyxis", f"container.image={IMAGE}", f"container.image_cache_dir={tmp_path}/cache"]
    monkeypatch.setenv("FAKE_RUNTIME_LOG", str(tmp_path / "runtime.log"))
    pull_image(cfg.container, executable=str(fake_runtime_bin(tmp_path / "bin") / "enroot"))
    assert PullContainer(cfg).completed().startswith("complete:")
    other = load_config(["recipe=lora_16gpu", "container.runtime=pyxis", f"container.image={IMAGE}-2",
                         f"container.image_cache_dir={tmp_path}/cache"])
    assert PullContainer(other).completed() == ""


def test_train_stage_complete_at_the_last_step(run_env):
    cfg = load_config(["recipe=lora_16gpu", "max_training_steps=4"])
    stage = Train(cfg, [])
    assert stage.completed() == "" and latest_checkpoint_step(cfg.paths.ckpt_path) is None
    Path(cfg.paths.ckpt_path).mkdir(parents=True)
    (Path(cfg.paths.ckpt_path) / "latest_ckpt_global_step.txt").write_text("2")
    assert stage.completed() == ""
    (Path(cfg.paths.ckpt_path) / "latest_ckpt_global_step.txt").write_text("4\n")
    assert "step 4 of 4" in stage.completed()


def test_everything_complete_submits_nothing_and_needs_no_scheduler(run_env, monkeypatch, capsys):
    """With every stage complete, submit records the run and never calls sbatch (there is none on PATH here)."""
    from beam_slurm.verbs.prepare_data import main as prepare_main

    root, data = run_env
    monkeypatch.setenv("PATH", "/nonexistent")
    cfg = load_config(["recipe=lora_16gpu", "max_training_steps=2"])
    assert prepare_main([*data, f"data.out_dir={cfg.paths.data_dir}"]) == 0
    Path(cfg.paths.ckpt_path).mkdir(parents=True)
    (Path(cfg.paths.ckpt_path) / "latest_ckpt_global_step.txt").write_text("2")
    assert submit_mod.main(["recipe=lora_16gpu", "max_training_steps=2", *data]) == 0
    out = capsys.readouterr().out
    assert out.count("skipped") == 3
    run = json.loads((Path(cfg.paths.export_path) / "beam_run" / "run.json").read_text())
    assert [s["status"] for s in run["submissions"][-1]["stages"]] == ["skipped"] * 3
    assert (Path(cfg.paths.export_path) / "beam_run" / "config.yaml").read_text().startswith("recipe: lora_16gpu")


def test_cleaned_files_without_a_manifest_are_named_before_anything_is_queued_and_can_be_adopted(run_env, capsys):
    from beam_slurm.jobs.data.manifest import MANIFEST_NAME
    from beam_slurm.verbs.prepare_data import main as prepare_main
    from beam_slurm.verbs.submit import main as submit_main

    root, data = run_env
    cfg = load_config(["recipe=lora_16gpu"])
    assert prepare_main([*data, f"data.out_dir={cfg.paths.data_dir}"]) == 0
    manifest = Path(cfg.paths.data_dir) / MANIFEST_NAME
    manifest.unlink()  # the files are there, written by hand or by an older version
    stage = PrepareData(cfg, data)
    blocked = stage.blocked()
    assert "aime-2025-cleaned.parquet is not recorded in the manifest" in blocked and "--adopt" in blocked
    assert stage.completed() == "" and PrepareData(cfg, data, force=True).blocked() == ""
    assert submit_main(["--dry-run", "recipe=lora_16gpu", "trainer.backend=rehearsal", *data]) == 2
    assert "the data job would refuse to overwrite" in capsys.readouterr().err
    assert prepare_main([*data, f"data.out_dir={cfg.paths.data_dir}", "--adopt"]) == 0
    assert stage.blocked() == "" and stage.completed().startswith("complete:")
    assert all(entry.get("adopted") for entry in json.loads(manifest.read_text())["outputs"].values())
