"""The rehearsal trainer on a real single-node Ray cluster (4 fake GPUs): steps, SkyRL's layout, resume, notice,
training metrics as the report reads them, HF exports that the evaluation accepts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from ray_processes import private_ray_head

from beam_slurm.core import notice
from beam_slurm.core.train_metrics import TRAIN_METRICS_FILE
from beam_slurm.jobs.evaluation.checkpoints import CheckpointError, check_model_dir, resolve_checkpoint
from beam_slurm.jobs.training.rehearsal import RehearsalSettings, export_hf
from beam_slurm.launch import run_results

ROOT = Path(__file__).resolve().parents[3]
RAY = ROOT / ".venv" / "bin" / "ray"


@pytest.fixture(scope="module")
def ray_head():
    with private_ray_head("--num-gpus=4", "--num-cpus=2", "--include-dashboard=false") as (address, _):
        yield address


def rehearsal(address, tmp_path, *overrides, step_seconds="0.1", wait=True):
    argv = [sys.executable, "-m", "beam_slurm.jobs.training.rehearsal",
            "trainer.placement.policy_num_nodes=1", "trainer.placement.policy_num_gpus_per_node=4",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}", f"trainer.export_path={tmp_path / 'exports'}",
            "trainer.ckpt_interval=3", "trainer.eval_interval=5",
            'data.val_data=["/data/aime-2025.parquet","/data/aime-2024.parquet"]',
            "generator.eval_n_samples_per_prompt=2", *overrides]
    env = {**os.environ, "RAY_ADDRESS": address, "BEAM_REHEARSAL_STEP_SECONDS": step_seconds}
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)


def metric_steps(tmp_path):
    path = tmp_path / "exports" / TRAIN_METRICS_FILE
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def test_steps_checkpoints_and_eval_layout(ray_head, tmp_path):
    proc = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=7", "trainer.hf_save_interval=5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 GPU actors on 1 nodes" in proc.stdout
    ckpts = tmp_path / "ckpts"
    assert sorted(p.name for p in ckpts.glob("global_step_*")) == ["global_step_3", "global_step_6", "global_step_7"]
    for step_dir in ckpts.glob("global_step_*"):
        assert (step_dir / "policy").is_dir() and (step_dir / "trainer_state.pt").is_file() and (step_dir / "data.pt").is_file()
    assert (ckpts / "latest_ckpt_global_step.txt").read_text() == "7"
    assert not list(ckpts.rglob("*.tmp"))
    exports = tmp_path / "exports"
    assert sorted(p.name for p in exports.glob("global_step_*")) == ["global_step_5", "global_step_7"]
    assert (exports / "global_step_5" / "policy").is_dir()
    evals = exports / "dumped_evals"
    assert sorted(p.name for p in evals.iterdir()) == ["global_step_0_evals", "global_step_5_evals", "global_step_7_evals"]
    rows = [json.loads(line) for line in (evals / "global_step_5_evals" / "aime-2025.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2 and all(r["rehearsal"] and r["score"] in (1.0, -1.0) for r in rows)
    assert set(rows[0]) >= {"input_prompt", "output_response", "score", "stop_reason", "env_class", "env_extras", "data_source"}
    aggregated = json.loads((evals / "global_step_5_evals" / "aggregated_results.jsonl").read_text())
    assert "eval/aime-2024/avg_score" in aggregated
    assert metric_steps(tmp_path) == list(range(1, 8))
    lines = [json.loads(line) for line in (exports / TRAIN_METRICS_FILE).read_text().splitlines()]
    assert all(line["rehearsal"] is True and line["attempt"] == 0 for line in lines)
    assert all(-1 <= line[run_results.REWARD_KEY] <= 1 and line[run_results.LENGTH_KEY] > 0 for line in lines)
    assert TRAIN_METRICS_FILE == run_results.TRAIN_METRICS_FILE
    gathered = run_results.gather(exports)
    assert sorted(gathered.train) == list(range(1, 8)) and not gathered.problems
    assert run_results.LENGTH_KEY in gathered.train[7]
    assert sorted(p.name for p in (exports / "rehearsal").iterdir()) == ["placement_attempt_0.json"]
    # no local HF model given: the export is the JSON stand-in, which no model loader accepts
    assert (exports / "global_step_5" / "policy" / "rehearsal_model.json").is_file()
    with pytest.raises(CheckpointError, match="no config.json"):
        check_model_dir(exports / "global_step_5" / "policy", "--checkpoint")
    placement = json.loads((exports / "rehearsal" / "placement_attempt_0.json").read_text())
    assert sorted(g for slot in placement for g in slot["gpu_ids"]) == ["0", "1", "2", "3"]


def test_resume_latest_continues_after_the_marker(ray_head, tmp_path):
    first = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=4", "trainer.resume_mode=latest")
    assert first.returncode == 0 and "starting from step 0" in first.stdout
    # an incomplete step directory ahead of the marker (a save cut short) must not become the resume point
    (tmp_path / "ckpts" / "global_step_6" / "policy").mkdir(parents=True)
    second = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=8", "trainer.resume_mode=latest")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resumed from step 4" in second.stdout
    assert metric_steps(tmp_path) == list(range(1, 9))  # no step redone
    assert (tmp_path / "ckpts" / "latest_ckpt_global_step.txt").read_text() == "8"
    assert (tmp_path / "ckpts" / "global_step_3" / "trainer_state.pt").is_file()  # nothing saved was deleted


def test_resume_from_path_and_refusals(ray_head, tmp_path):
    assert rehearsal(ray_head, tmp_path, "trainer.max_training_steps=3").returncode == 0
    proc = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=5", "trainer.resume_mode=from_path",
                     f"trainer.resume_path={tmp_path / 'ckpts' / 'global_step_3'}")
    assert proc.returncode == 0 and "resumed from step 3" in proc.stdout
    overwrite = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=5", "trainer.resume_mode=none")
    assert overwrite.returncode == 2 and "would be overwritten" in overwrite.stderr
    missing = rehearsal(ray_head, tmp_path, "trainer.resume_mode=latest")
    assert missing.returncode == 2 and "trainer.max_training_steps" in missing.stderr
    bad_path = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=5", "trainer.resume_mode=from_path",
                         f"trainer.resume_path={tmp_path}")
    assert bad_path.returncode == 2 and "global_step_N" in bad_path.stderr


def test_save_on_notice_stops_after_saving(ray_head, tmp_path):
    proc = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=40", step_seconds="0.3", wait=False)
    try:
        deadline = time.time() + 60
        while len(metric_steps(tmp_path)) < 2 and time.time() < deadline:
            time.sleep(0.2)
        assert metric_steps(tmp_path), "the rehearsal did not start stepping"
        notice.request_save(tmp_path / "ckpts", "SIGUSR1 time limit (test)")
        requested = notice.pending_request(tmp_path / "ckpts")["time"]
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    last = metric_steps(tmp_path)[-1]
    assert 2 <= last < 40
    assert f"stopped on notice after saving step {last}" in out
    assert (tmp_path / "ckpts" / "latest_ckpt_global_step.txt").read_text() == str(last)
    assert notice.saved_since(tmp_path / "ckpts", requested) == last
    assert notice.pending_request(tmp_path / "ckpts") is None
    resumed = rehearsal(ray_head, tmp_path, f"trainer.max_training_steps={last + 2}")
    assert resumed.returncode == 0 and f"resumed from step {last}" in resumed.stdout
    assert metric_steps(tmp_path) == list(range(1, last + 3))


def fake_hf_model(folder: Path) -> Path:
    """A tiny stand-in Hugging Face model directory: config, two weight shards with their index, tokenizer files."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for index, shard in enumerate(shards):
        (folder / shard).write_bytes(bytes([index]) * 4096)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": shards[0], "b": shards[1]}}))
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / ".cache").mkdir()  # what `huggingface-cli download --local-dir` leaves: not part of the model
    (folder / ".cache" / "download.lock").write_text("")
    return folder


def test_hf_exports_hold_the_base_model_when_it_is_a_local_directory(ray_head, tmp_path):
    base = fake_hf_model(tmp_path / "base")
    proc = rehearsal(ray_head, tmp_path, "trainer.max_training_steps=4", "trainer.hf_save_interval=2",
                     f"trainer.policy.model.path={base}", step_seconds="0.05")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exports = tmp_path / "exports"
    assert sorted(p.name for p in exports.glob("global_step_*")) == ["global_step_2", "global_step_4"]
    for step in (2, 4):
        step_dir = exports / f"global_step_{step}"
        assert [p.name for p in step_dir.iterdir()] == ["policy"]  # no staging directory left behind
        policy = step_dir / "policy"
        check_model_dir(policy, "--checkpoint")
        resolved = resolve_checkpoint(step_dir)
        assert resolved.model_path == policy.resolve() and resolved.global_step == step
        names = sorted(p.name for p in policy.iterdir())
        assert names == sorted(["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                "model.safetensors.index.json", "tokenizer_config.json", "rehearsal.json"])
        for name in names:
            if name != "rehearsal.json":  # same file system: hard links to the base model's files
                assert (policy / name).stat().st_ino == (base / name).stat().st_ino
        stamp = json.loads((policy / "rehearsal.json").read_text())
        assert stamp["rehearsal"] is True and stamp["global_step"] == step and "unchanged" in stamp["weights"]
        assert stamp["base_model"] == str(base.resolve()) and stamp["files_hard_linked"] == 5


def test_hf_export_copies_across_file_systems_and_replaces_an_earlier_export(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's temp dir")
    base = fake_hf_model(Path(tempfile.mkdtemp(dir=shm)) / "base")
    try:
        settings = RehearsalSettings(export_path=str(tmp_path / "exports"), policy_model_path=str(base))
        policy = export_hf(settings, 3)
        stamp = json.loads((policy / "rehearsal.json").read_text())
        assert stamp["files_copied"] == 5 and stamp["files_hard_linked"] == 0
        assert (policy / "model-00002-of-00002.safetensors").read_bytes() == bytes([1]) * 4096
        check_model_dir(policy, "--checkpoint")
        # a requeued attempt exporting the same step again replaces the export whole
        (base / "tokenizer_config.json").write_text('{"changed": true}')
        (policy / "left_over_from_an_earlier_attempt").write_text("")
        again = export_hf(settings, 3)
        assert again == policy and json.loads((policy / "tokenizer_config.json").read_text()) == {"changed": True}
        assert not (policy / "left_over_from_an_earlier_attempt").exists()
        assert [p.name for p in policy.parent.iterdir()] == ["policy"]
    finally:
        shutil.rmtree(base.parent, ignore_errors=True)


def test_hf_export_stand_in_when_the_model_is_not_a_local_directory(tmp_path):
    for model in ("Qwen/Qwen2.5-Math-1.5B", str(tmp_path)):  # a hub id; a directory without config.json
        settings = RehearsalSettings(export_path=str(tmp_path / "exports"), policy_model_path=model)
        policy = export_hf(settings, 1)
        assert [p.name for p in policy.iterdir()] == ["rehearsal_model.json"]
        assert repr(model) in json.loads((policy / "rehearsal_model.json").read_text())["why"]
        shutil.rmtree(tmp_path / "exports")


def test_eval_dumps_are_named_by_the_files_data_source(tmp_path):
    """Like SkyRL, dumps are keyed by the parquet's data_source column; a file without one is named after itself."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_slurm.jobs.training.rehearsal import _data_source

    parquet = tmp_path / "aime-2025-cleaned.parquet"
    pq.write_table(pa.table({"data_source": ["aime2025", "aime2025"], "prompt": ["a", "b"]}), parquet)
    assert _data_source(str(parquet)) == "aime2025"
    assert _data_source(str(tmp_path / "missing" / "aime-2024-cleaned.parquet")) == "aime-2024-cleaned"
