"""`beam-slurm train`: the recipe follows the allocation, requeued attempts resume, the driver is the recipe's, every
job setting comes from the recipe (no second parser, no defaults of its own)."""

import shlex

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.config.schema import ClusterConfig
from beam_slurm.jobs.training import train_job
from beam_slurm.jobs.training.job_settings import TrainJobSettings, allocation_overrides, job_settings, resume_overrides
from beam_slurm.policy.sizing import node_needs

PATHS = ["paths.model_path=/shared/m", "paths.data_dir=/shared/d", "paths.skyrl_dir=/shared/SkyRL",
         "paths.ckpt_path=/shared/ck", "paths.export_path=/shared/ex"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("RESUME_MODE", "MAX_TRAINING_STEPS", "CKPT_INTERVAL", "OPTIMIZER_STATE_DISK_DIR", "BEAM_TRAINER_BACKEND"):
        monkeypatch.delenv(var, raising=False)


def test_allocation_sets_nodes_and_gpus_unless_given():
    env = {"SLURM_JOB_NUM_NODES": "4", "SLURM_GPUS_ON_NODE": "8"}
    assert allocation_overrides(["recipe=lora_16gpu"], env) == ["cluster.nodes=4", "cluster.gpus_per_node=8"]
    assert allocation_overrides(["cluster.nodes=2"], env) == ["cluster.gpus_per_node=8"]
    assert allocation_overrides([], {}) == []
    cfg = load_config(["recipe=lora_16gpu", *PATHS, *allocation_overrides([], env)])
    assert cfg.total_gpus == 32 and cfg.num_engines == 2  # replicas follow the bigger allocation


def test_requeued_attempt_resumes_only_when_a_checkpoint_exists(tmp_path):
    assert resume_overrides(str(tmp_path), {"SLURM_RESTART_COUNT": "1"}) == []
    assert resume_overrides(str(tmp_path), {"SLURM_RESTART_COUNT": "0"}) == []
    (tmp_path / "latest_ckpt_global_step.txt").write_text("10")
    assert resume_overrides(str(tmp_path), {"SLURM_RESTART_COUNT": "2"})[0] == "checkpoint.resume_mode=latest"
    assert resume_overrides(str(tmp_path), {}) == []
    cfg = load_config(["recipe=lora_16gpu", *PATHS, "checkpoint.resume_mode=from_path",
                       "checkpoint.resume_path=/old/global_step_5",
                       *resume_overrides(str(tmp_path), {"SLURM_RESTART_COUNT": "1"})])
    assert (cfg.checkpoint.resume_mode, cfg.checkpoint.resume_path) == ("latest", None)


def test_skyrl_driver_starts_in_the_checkout_and_rehearsal_does_not():
    cfg = load_config(["recipe=lora_16gpu", *PATHS])
    settings, env = job_settings(cfg)
    assert settings.driver[:4] == ["/bin/sh", "-c", 'cd "$0" && exec "$@"', "/shared/SkyRL"]
    assert settings.driver[5:7] == ["-m", "beam_slurm.jobs.training.entrypoint"]
    assert (settings.ckpt_path, settings.log_dir, settings.nodes, settings.gpus_per_node) == ("/shared/ck", "/shared/ex/logs", 2, 8)
    assert settings.preflight_checks.skyrl_dir == "/shared/SkyRL"
    assert env["CKPT_PATH"] == "/shared/ck"
    rehearsal, _ = job_settings(load_config(["recipe=lora_16gpu", *PATHS, "trainer.backend=rehearsal"]))
    assert rehearsal.driver[1:3] == ["-m", "beam_slurm.jobs.training.rehearsal"]
    assert rehearsal.preflight_checks.skyrl_dir == ""
    # the sh -c wrapper keeps every argument intact (no word splitting of paths or values)
    assert shlex.join(settings.driver).count("trainer.train_batch_size=32") == 1


def test_preflight_asks_for_the_seed_storage_of_full_finetuning(monkeypatch):
    full = load_config(["recipe=bf16_64gpu", *PATHS])
    needs = node_needs(full)
    assert 0.6e12 <= needs.scratch_bytes <= 0.7e12 and needs.host_ram_bytes == 0
    settings, _ = job_settings(full)
    assert settings.preflight_checks.scratch_need_bytes == needs.scratch_bytes
    assert settings.preflight_checks.ckpt_need_bytes == needs.ckpt_bytes == int(7e12) * 2  # 50 steps, every 25
    monkeypatch.setenv("OPTIMIZER_STATE_DISK_DIR", "")
    cpu = node_needs(load_config(["recipe=bf16_64gpu", *PATHS]))
    assert cpu.scratch_bytes == 0 and cpu.host_ram_bytes == int(1.7e12)
    lora = node_needs(load_config(["recipe=lora_32gpu", *PATHS]))
    assert (lora.scratch_bytes, lora.host_ram_bytes, lora.ckpt_bytes) == (0, 0, 0)


def test_job_settings_are_the_schema_values_with_no_defaults_of_their_own():
    """grace 180 s and 10 requeues (the schema's), not the 240 s and 3 the removed second parser had."""
    import dataclasses

    schema = ClusterConfig()
    settings, _ = job_settings(load_config(["recipe=lora_16gpu", *PATHS]))
    assert (settings.grace_s, settings.max_requeues) == (schema.grace_s, schema.max_requeues) == (180, 10)
    # The Ray step's stop window holds the driver and Ray (45 s) and each node's last log copy (cluster.log_copy_s).
    assert settings.stop_grace_s == schema.stop_grace_s + schema.log_copy_s
    no_default = (dataclasses.MISSING, dataclasses.MISSING)
    assert all((f.default, f.default_factory) == no_default for f in dataclasses.fields(TrainJobSettings))
    changed, _ = job_settings(load_config(["recipe=lora_16gpu", *PATHS, "cluster.grace_s=60", "cluster.max_requeues=1"]))
    assert (changed.grace_s, changed.max_requeues) == (60, 1)


def test_train_job_entry_takes_recipe_overrides_and_a_driver(monkeypatch, capsys):
    """`python -m beam_slurm.jobs.training.train_job [overrides] -- DRIVER`: no options of its own; errors name the key."""
    assert train_job.main(["python", "x.py"]) == 2
    assert "driver" in capsys.readouterr().err
    assert train_job.main(["--grace-s", "60", "--", "python", "x.py"]) == 2
    assert "--grace-s" in capsys.readouterr().err
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert train_job.main(["recipe=lora_16gpu", *PATHS, "cluster.max_requeues=-1", "--", "python", "x.py"]) == 2
    assert "cluster.max_requeues" in capsys.readouterr().err
    assert train_job.main(["recipe=lora_16gpu", *PATHS, "paths.ckpt_path=rel/ckpt", "--", "python", "x.py"]) == 2
    assert "paths.ckpt_path" in capsys.readouterr().err


def test_a_driver_given_replaces_the_trainer_under_the_same_settings():
    cfg = load_config(["recipe=lora_16gpu", *PATHS])
    settings, env = job_settings(cfg, driver=["python", "double.py", "3"])
    recipe, _ = job_settings(cfg)
    assert settings.driver == ["python", "double.py", "3"] and env == {}
    assert settings.preflight_checks.skyrl_dir == ""  # the SkyRL checkout is not the driver's business
    assert (settings.grace_s, settings.max_requeues, settings.log_dir) == (recipe.grace_s, recipe.max_requeues,
                                                                           recipe.log_dir)


def test_chain_turns_exports_on():
    cfg = load_config(["recipe=lora_16gpu", *PATHS, "eval.chain=true"])
    assert cfg.checkpoint.hf_save_interval == cfg.checkpoint.interval == 10
    assert load_config(["recipe=lora_16gpu", *PATHS]).checkpoint.hf_save_interval == -1


def _export(root, step):
    policy = root / f"global_step_{step}" / "policy"
    policy.mkdir(parents=True)
    (policy / "config.json").write_text("{}")
    (policy / "model.safetensors").write_bytes(b"weights")


def test_eval_chain_submits_each_export_once_and_the_fresh_last_one_at_the_end(tmp_path, monkeypatch):
    """The watcher waits for exports to settle; when the run is finished, the seconds-old last export goes too.

    `submit` is replaced by a recorder (a test double for sbatch); the real submission runs in the sandbox tests.
    """
    from beam_slurm.verbs.train import EvalChain

    cfg = load_config(["recipe=lora_16gpu", *PATHS, "eval.chain=true", "eval.chain_poll_s=0.05",
                       "eval.chain_settle_s=3600", "max_training_steps=20", f"paths.ckpt_path={tmp_path}/ck",
                       f"paths.export_path={tmp_path}/ex"])
    submitted = []
    monkeypatch.setattr(EvalChain, "submit",
                        lambda self, step, checkpoint: submitted.append(str(checkpoint)) or f"job{len(submitted)}")
    (tmp_path / "ck").mkdir()
    _export(tmp_path / "ex", 10)
    _export(tmp_path / "ex", 20)
    (tmp_path / "ck" / "latest_ckpt_global_step.txt").write_text("10")
    with EvalChain(cfg):
        pass  # run not finished: nothing has settled for an hour, so nothing is submitted
    assert submitted == []
    (tmp_path / "ck" / "latest_ckpt_global_step.txt").write_text("20")
    with EvalChain(cfg):
        pass
    assert sorted(submitted) == [f"{tmp_path}/ex/global_step_10", f"{tmp_path}/ex/global_step_20"]
    with EvalChain(cfg):
        pass  # a requeued attempt's chain finds the claims and submits nothing again
    assert len(submitted) == 2
