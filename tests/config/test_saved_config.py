"""The run folder's config.yaml reads back to the same values, and mapping settings take a whole `{...}` value."""
from __future__ import annotations

from omegaconf import OmegaConf

from beam_slurm.config.load import load_config, to_yaml
from beam_slurm.config.overrides import override


def test_saved_config_reads_back_exactly_even_with_references_in_text():
    cfg = load_config(["recipe=lora_16gpu", override("paths.model_path", "/m/${MODEL}/a b"),
                       override("run_name", "r\\${x}")], validate=False)
    cfg.trainer.extra_env["TAG"] = "${not_a_reference}"
    back = OmegaConf.create(to_yaml(cfg))
    assert back.paths.model_path == "/m/${MODEL}/a b"
    assert back.run_name == "r\\${x}"
    assert back.trainer.extra_env.TAG == "${not_a_reference}"
    assert back.recipe == "lora_16gpu" and back.cluster.grace_s == cfg.cluster.grace_s


def test_a_mapping_setting_takes_a_whole_mapping():
    cfg = load_config(["recipe=lora_16gpu", "trainer.extra_env={HF_HUB_OFFLINE: '1', NCCL_DEBUG: WARN}"],
                      validate=False)
    assert cfg.trainer.extra_env == {"HF_HUB_OFFLINE": "1", "NCCL_DEBUG": "WARN"}
    one = load_config(["recipe=lora_16gpu", "+trainer.extra_env.HF_HOME=/shared/hf"], validate=False)
    assert one.trainer.extra_env == {"HF_HOME": "/shared/hf"}
