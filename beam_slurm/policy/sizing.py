"""Checkpoint and storage arithmetic for `plan` and the job's preflight, below both so the job never imports `plan`: the
seed's numbers for the 501B-A23B model on 8 nodes, scaled by training nodes (LoRA is not sized here)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig

BF16_WEIGHTS_TB = 1.0  # read by every node from shared storage
OPTIMIZER_STATE_TB_TOTAL = 5.2  # full fine-tuning, all training nodes
FULL_CHECKPOINT_TB_TOTAL = 7.0  # one full checkpoint, all training nodes
CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE = 1.7  # without a node-local NVMe folder
_TB = 1000**4


def checkpoints_kept(cfg: BeamConfig) -> int:
    """Checkpoints on disk at the end: every interval plus the final step, capped by max_to_keep."""
    saved = math.ceil(cfg.max_training_steps / cfg.checkpoint.interval)  # SkyRL also saves at the last step
    return min(saved, cfg.checkpoint.max_to_keep) if cfg.checkpoint.max_to_keep > 0 else saved


def full_checkpoint_tb_per_node(cfg: BeamConfig) -> float:
    return FULL_CHECKPOINT_TB_TOTAL / max(cfg.training_nodes, 1)


def optimizer_state_tb_per_node(cfg: BeamConfig) -> float:
    """TB of streamed optimizer state one training node keeps on its node-local NVMe."""
    return OPTIMIZER_STATE_TB_TOTAL / max(cfg.training_nodes, 1)


@dataclass(frozen=True)
class NodeNeeds:
    """Bytes each node must have free before training starts (0: not checked)."""

    scratch_bytes: int  # Node-local NVMe for the optimizer state (paths.optimizer_state_disk_dir)
    host_ram_bytes: int  # Host RAM for the CPU optimizer (no NVMe folder set)
    ckpt_bytes: int  # Shared checkpoint storage for every kept checkpoint, as one node sees the shared folder


def node_needs(cfg: BeamConfig) -> NodeNeeds:
    """What preflight asks of each node: nothing for the rehearsal (tiny files) or LoRA, the seed's numbers else."""
    if cfg.trainer.backend == "rehearsal" or cfg.is_lora:
        return NodeNeeds(0, 0, 0)
    on_nvme = bool(cfg.paths.optimizer_state_disk_dir)
    return NodeNeeds(
        scratch_bytes=int(optimizer_state_tb_per_node(cfg) * _TB) if on_nvme else 0,
        host_ram_bytes=0 if on_nvme else int(CPU_OPTIMIZER_HOST_RAM_TB_PER_NODE * _TB),
        ckpt_bytes=int(FULL_CHECKPOINT_TB_TOTAL * checkpoints_kept(cfg) * _TB),
    )
