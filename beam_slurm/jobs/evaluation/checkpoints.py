"""Resolve what an evaluation loads: a full Hugging Face model directory, or a base model plus a LoRA adapter.

``--checkpoint`` is a SkyRL HF export (``global_step_N[/policy]``), any HF model directory, or a PEFT adapter with its
base model from ``--base-model`` or the adapter's ``base_model_name_or_path`` when that is a local directory. Everything
here only reads files, so a bad path fails before any model is loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beam_slurm.core.errors import UserError
from beam_slurm.core.layout import POLICY_SUBDIR, STEP_DIR, evaluation_dir

# vllm is imported inside lora_request: only a LoRA checkpoint needs it, and it takes seconds to import.

WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


class CheckpointError(UserError, ValueError):
    """An evaluation input that cannot be used; the message names the option and the fix."""


@dataclass(frozen=True)
class EvalInput:
    """What the generation engine loads, and where the checkpoint sits in its run."""

    model_path: Path  # Hugging Face model directory vLLM loads (the full model, or the LoRA's base model)
    lora_path: Path | None = None  # PEFT adapter directory applied on top of model_path; None for a full model
    lora_rank: int | None = None  # The adapter's rank (vLLM must reserve slots at least this large)
    global_step: int | None = None  # from global_step_N; None outside a run (e.g. the base model)
    run_root: Path | None = None  # the folder holding global_step_N; None outside a run

    @property
    def label(self) -> str:
        """Short name for logs and result files."""
        step = f"global_step_{self.global_step}" if self.global_step is not None else self.model_path.name
        return f"{step} (LoRA)" if self.lora_path else step

    def default_out_dir(self) -> Path | None:
        """``<run_root>/beam_evals/global_step_N/`` beside the checkpoint; None when the step is unknown."""
        if self.run_root is None or self.global_step is None:
            return None
        return evaluation_dir(self.run_root, self.global_step)

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary kept with the results."""
        return {
            "model_path": str(self.model_path),
            "lora_path": str(self.lora_path) if self.lora_path else None,
            "lora_rank": self.lora_rank,
            "global_step": self.global_step,
        }


def step_of(directory: Path) -> tuple[int | None, Path | None]:
    """(step, run_root) when directory is global_step_N or global_step_N/policy."""
    for candidate in (directory, directory.parent):
        match = STEP_DIR.match(candidate.name)
        if match and (candidate == directory or directory.name == POLICY_SUBDIR):
            return int(match.group(1)), candidate.parent
    return None, None


def check_model_dir(directory: Path, option: str) -> None:
    """Raise CheckpointError unless directory is a complete Hugging Face model (config, weights, all shards)."""
    if not (directory / "config.json").is_file():
        raise CheckpointError(f"{option}: {directory} has no config.json; point it at a Hugging Face model directory")
    if not any(next(directory.glob(pattern), None) for pattern in WEIGHT_GLOBS):
        raise CheckpointError(
            f"{option}: {directory} has config.json but no weights (*.safetensors or "
            "pytorch_model*.bin); is the export still being written?"
        )
    indexes = [directory / name for name in ("model.safetensors.index.json", "pytorch_model.bin.index.json")]
    for index_file in (index for index in indexes if index.is_file()):
        try:
            shards = set(json.loads(index_file.read_text())["weight_map"].values())
        except (ValueError, KeyError) as exc:
            raise CheckpointError(f"{option}: {index_file} is not a valid weight index ({exc})") from exc
        missing = sorted(s for s in shards if not (directory / s).is_file())
        if missing:
            raise CheckpointError(
                f"{option}: {directory} lists {len(missing)} missing weight shard(s), e.g. "
                f"{missing[0]}; the export is incomplete"
            )


def _adapter_rank(adapter_dir: Path) -> tuple[int, str | None]:
    config_file = adapter_dir / "adapter_config.json"
    try:
        config = json.loads(config_file.read_text())
    except ValueError as exc:
        raise CheckpointError(f"--checkpoint: {config_file} is not valid JSON ({exc})") from exc
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise CheckpointError(f"--checkpoint: {config_file} has no positive integer rank 'r'")
    if not any((adapter_dir / name).is_file() for name in ADAPTER_WEIGHTS):
        raise CheckpointError(
            f"--checkpoint: {adapter_dir} has adapter_config.json but no {' or '.join(ADAPTER_WEIGHTS)}"
        )
    return rank, config.get("base_model_name_or_path")


def model_dir(checkpoint: str | Path) -> Path:
    """The folder that holds the model: global_step_N/policy when there is one, else the checkpoint itself."""
    path = Path(checkpoint).expanduser().resolve()
    return path / POLICY_SUBDIR if (path / POLICY_SUBDIR).is_dir() and STEP_DIR.match(path.name) else path


def is_adapter(checkpoint: str | Path) -> bool:
    """The checkpoint is a LoRA adapter (it needs a base model), not a whole model."""
    return (model_dir(checkpoint) / "adapter_config.json").is_file()


def resolve_checkpoint(checkpoint: str | Path, base_model: str | Path | None = None) -> EvalInput:
    """Turn ``--checkpoint`` (and ``--base-model``) into an EvalInput, or raise CheckpointError saying why not."""
    path = model_dir(checkpoint)
    if not path.is_dir():
        raise CheckpointError(f"--checkpoint: {path} is not a directory")
    step, run_root = step_of(path)

    if is_adapter(path):
        rank, recorded_base = _adapter_rank(path)
        if base_model is None and not (recorded_base and Path(recorded_base).is_dir()):
            raise CheckpointError(
                f"--checkpoint: {path} is a LoRA adapter; pass --base-model DIR with the base model "
                f"it was trained on (the adapter records {recorded_base!r}, which is not a local "
                "directory)"
            )
        base_model = recorded_base if base_model is None else base_model
        assert base_model is not None  # given, or else the recorded one (checked above)
        base = Path(base_model).expanduser().resolve()
        check_model_dir(base, "--base-model")
        return EvalInput(model_path=base, lora_path=path, lora_rank=rank, global_step=step, run_root=run_root)

    if base_model is not None:
        raise CheckpointError(
            f"--base-model is only for LoRA adapters, and {path} has no adapter_config.json; drop "
            "--base-model to evaluate the full model"
        )
    check_model_dir(path, "--checkpoint")
    return EvalInput(model_path=path, global_step=step, run_root=run_root)


def lora_request(eval_input: EvalInput):
    """The vLLM LoRARequest for eval_input's adapter, or None for a full model."""
    if eval_input.lora_path is None:
        return None
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=eval_input.label, lora_int_id=1, lora_path=str(eval_input.lora_path))
