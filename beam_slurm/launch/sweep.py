"""Multirun sweeps: expand `key=a,b` overrides with Hydra's own parser (the cartesian product in the order given; `a,b`,
`choice(a,b)`, `range(0,4)`, quoted values) and give each point its own run name and paths."""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from beam_slurm.config.load import parse_overrides
from beam_slurm.config.overrides import override
from beam_slurm.config.schema import BeamConfig
from beam_slurm.core.errors import ConfigError, ConfigProblem

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Combination:
    overrides: list[str]  # fixed ones and each swept one's chosen value
    choices: list[tuple[str, str]] = field(default_factory=list)  # (key, value) of each swept override at this point


def expand(overrides: list[str]) -> list[Combination]:
    """Every combination, cartesian product over the swept overrides (Hydra basic sweeper order)."""
    axes: list[list[tuple[str, tuple[str, str] | None]]] = []
    for parsed in parse_overrides(overrides):
        if parsed.is_sweep_override():
            key = parsed.get_key_element()
            values = list(parsed.sweep_string_iterator())
            if not values:
                raise ConfigError([ConfigProblem(key, parsed.input_line, "this sweep has no values")])
            axes.append([(f"{key}={value}", (key.lstrip("+~"), value)) for value in values])
        else:
            axes.append([(str(parsed.input_line), None)])
    return [
        Combination([text for text, _ in point], [c for _, c in point if c is not None])
        for point in itertools.product(*axes)
    ]


def slug(choices: list[tuple[str, str]]) -> str:
    """Short, folder-safe name of a combination: `precision_bf16-rank_64` (last key part unless two collide)."""
    short = [key.split(".")[-1] for key, _ in choices]
    return "-".join(
        _UNSAFE.sub("_", f"{name if short.count(name) == 1 else key}_{value}").strip("_")
        for (key, value), name in zip(choices, short, strict=False)
    )


def rename_run(cfg: BeamConfig, run_slug: str, *, home: str) -> None:
    """Give a sweep point its own run name and paths (derived again, or a per-run subfolder of paths the user set)."""
    old = cfg.run_name
    new = f"{old}-{run_slug}" if run_slug else old
    p = cfg.paths
    assert p.ckpt_path is not None and p.export_path is not None and p.log_dir is not None  # fill_defaults sets them
    default_ckpt, default_export = f"{home}/ckpts/{old}", f"{home}/exports/{old}"
    default_logs = f"{p.export_path}/logs"
    cfg.run_name = new
    p.ckpt_path = f"{home}/ckpts/{new}" if p.ckpt_path == default_ckpt else f"{p.ckpt_path.rstrip('/')}/{new}"
    p.export_path = f"{home}/exports/{new}" if p.export_path == default_export else f"{p.export_path.rstrip('/')}/{new}"
    p.log_dir = f"{p.export_path}/logs" if p.log_dir == default_logs else f"{p.log_dir.rstrip('/')}/{new}"


def sweep_root(export_paths: list[str]) -> Path:
    """Folder for the sweep record: beside the runs' export folders (their common parent)."""
    parents = {str(Path(p).parent) for p in export_paths}
    return Path(parents.pop() if len(parents) == 1 else os.path.commonpath(export_paths))


def share_group(cfg: BeamConfig, overrides: list[str], sweep_name: str) -> list[str]:
    """Unless trainer.wandb_group was set, a point's overrides carry its sweep's name as W&B group to the job."""
    if cfg.trainer.wandb_group:
        return overrides
    cfg.trainer.wandb_group = sweep_name
    return [*overrides, override("trainer.wandb_group", sweep_name)]
