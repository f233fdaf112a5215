"""Preflight checks that run without a cluster (the step on every node is exercised by the sandbox tests)."""
from __future__ import annotations

from beam_slurm.jobs.training.preflight import PreflightSettings, check_node, collect_results


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
