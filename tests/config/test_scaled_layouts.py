"""Scaled-out layouts through cluster.nodes: the derived data-parallel size, vLLM replicas, batch arithmetic and
storage at 8 and 16 nodes (and beyond), validation naming node counts that work, and the seed layouts unchanged."""

from __future__ import annotations

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.config.validation import problems
from beam_slurm.verbs.plan import plan_rows


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    for name in ("CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "MAX_TRAINING_STEPS", "CKPT_INTERVAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MODEL_PATH", "/models/beam")
    monkeypatch.setenv("DATA_DIR", "/data")
    monkeypatch.setenv("SKYRL_DIR", "/skyrl")


def layout(*overrides: str):
    cfg = load_config(list(overrides), validate=False)
    rows = {item: value for section, item, value in plan_rows(cfg) if section != "paths"}
    return cfg, rows, [str(p) for p in problems(cfg)]


# recipe: (nodes, training nodes, data-parallel, vLLM replicas, responses per DP rank per mini-batch) as the README says
SEED = {
    "lora_16gpu": (2, 2, 2, 1, 128),
    "lora_32gpu": (4, 4, 4, 2, 64),
    "bf16_64gpu": (8, 8, 4, 4, 64),
    "mxfp8_64gpu": (8, 4, 2, 4, 128),
}


@pytest.mark.parametrize("recipe", sorted(SEED))
def test_seed_layouts_are_unchanged(recipe):
    cfg, rows, bad = layout(f"recipe={recipe}")
    nodes, training_nodes, dp, engines, per_rank = SEED[recipe]
    assert (cfg.cluster.nodes, cfg.training_nodes, cfg.data_parallel, cfg.num_engines) == (nodes, training_nodes, dp, engines)
    assert f"({per_rank} responses per DP rank)" in rows["mini-batches"]
    assert bad == []


@pytest.mark.parametrize("recipe, nodes, dp, engines, per_rank, per_engine", [
    ("lora_16gpu", 8, 8, 4, 32, "64 responses (8 prompts) per step"),
    ("lora_16gpu", 16, 16, 8, 16, "32 responses (4 prompts) per step"),
    ("lora_32gpu", 8, 8, 4, 32, "128 responses (16 prompts) per step"),
    ("lora_32gpu", 16, 16, 8, 16, "64 responses (8 prompts) per step"),
    ("bf16_64gpu", 16, 8, 8, 32, "64 responses (8 prompts) per step"),
])
def test_scaled_out_layouts_derive_dp_engines_and_batch(recipe, nodes, dp, engines, per_rank, per_engine):
    cfg, rows, bad = layout(f"recipe={recipe}", f"cluster.nodes={nodes}")
    assert bad == []
    assert (cfg.data_parallel, cfg.num_engines, cfg.total_gpus) == (dp, engines, nodes * 8)
    assert rows["nodes x GPUs"] == f"{nodes} x 8 = {nodes * 8} GPUs"
    assert rows["data-parallel size"] == str(dp)
    assert rows["vLLM replicas"].startswith(f"{engines} x (TP8 x PP")
    assert f"({per_rank} responses per DP rank)" in rows["mini-batches"]
    assert rows["per vLLM replica"] == per_engine


def test_storage_scales_with_training_nodes():
    _, rows8, _ = layout("recipe=bf16_64gpu")
    _, rows16, _ = layout("recipe=bf16_64gpu", "cluster.nodes=16")
    assert "~0.88 TB per training node" in rows8["checkpoints"] and "~0.44 TB per training node" in rows16["checkpoints"]
    assert "~0.65 TB per node" in rows8["optimizer state"] and "~0.33 TB per node" in rows16["optimizer state"]
    _, lora, _ = layout("recipe=lora_16gpu", "cluster.nodes=16")
    assert "LoRA adapter checkpoints" in lora["checkpoints"]


def test_a_layout_that_does_not_divide_names_node_counts_that_do():
    _, _, bad = layout("recipe=mxfp8_64gpu", "cluster.nodes=16")  # 12 training nodes: DP 6 does not divide 256
    assert len(bad) == 1 and bad[0].startswith("batch.prompts_per_step=64: each mini-batch has 256 responses, not "
                                               "divisible by the 6 data-parallel ranks"), bad
    hint = bad[0].split("; ", 1)[1]
    suggested = [int(n) for n in hint.split("cluster.nodes=")[1].split(" works")[0].split(" or ")]
    splits = [int(n) for n in hint.split("trainer.rollout_nodes=")[1].split(" works")[0].split(" or ")]
    assert suggested and splits and 8 in splits, hint
    for nodes in suggested:  # every suggestion holds
        assert layout("recipe=mxfp8_64gpu", f"cluster.nodes={nodes}")[2] == [], nodes
    for rollout in splits:
        assert layout("recipe=mxfp8_64gpu", "cluster.nodes=16", f"trainer.rollout_nodes={rollout}")[2] == [], rollout


def test_lora_at_a_node_count_that_breaks_the_expert_grid_is_refused_with_the_fix():
    _, _, bad = layout("recipe=lora_16gpu", "cluster.nodes=3")
    assert any(p.startswith("megatron.expert_parallel=8") for p in bad), bad
    assert all("cluster.nodes=2 or 4 or 8 or 16 works" in p for p in bad), bad
