"""Check `key=value` overrides against SkyRL's own config classes (run where skyrl is installed: Python 3.12).

    python -m beam_slurm.jobs.training.conformance [--validate] [--dapo-only=key1,key2] key=value ...

Prints ``check``'s JSON object and exits 0 when ok, 1 otherwise. Core keys are parsed by ``SkyRLTrainConfig`` (strict:
unknown keys are rejected by name). The DAPO overlong-penalty keys belong to a config subclass in the SkyRL checkout's
examples (not in the wheel): imported from a checkout root, else rebuilt with SkyRL's ``make_config`` from the field
list below (tag skyrl-v0.3.0). ``--validate`` also runs SkyRL's cross-field checks (``validate_cfg``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, make_dataclass

# skyrl is imported inside the functions, on purpose: it lives in SkyRL's Python 3.12 environment only.

# DAPOAlgorithmConfig's extra fields in skyrl-v0.3.0's examples/train/algorithms/dapo/main_dapo.py: (type, default).
DAPO_FIELDS = {"overlong_buffer_len": (int, 512), "overlong_buffer_penalty_factor": (float, 1.0)}
DAPO_KEY_PREFIX = "trainer.algorithm."


def dapo_config_class():
    """(DAPO config class, where it came from)."""
    try:
        from examples.train.algorithms.dapo.main_dapo import DAPOConfig

        return DAPOConfig, "examples.train.algorithms.dapo.main_dapo"
    except Exception:  # not a checkout root, or the example needs the GPU stack to import
        pass
    from skyrl.train.config import AlgorithmConfig, make_config

    algorithm_cls = make_dataclass(
        "DAPOAlgorithmConfig",
        [(name, type_, field(default=default)) for name, (type_, default) in DAPO_FIELDS.items()],
        bases=(AlgorithmConfig,),
    )
    return make_config(algorithm_cls=dataclass(algorithm_cls)), "make_config + field list read from skyrl-v0.3.0"


def check(overrides: list[str], dapo_only_keys: list[str], validate: bool = False) -> dict:
    """Parse ``overrides`` with SkyRL's classes; returns {"ok", "errors", "dapo_keys", "dapo_source"}."""
    from skyrl.train.config.config import SkyRLTrainConfig

    errors: list[str] = []
    key_of = {item: item.split("=", 1)[0] for item in overrides}
    malformed = [item for item in overrides if "=" not in item]
    errors += [f"not a key=value override: {item!r}" for item in malformed]
    core = [item for item in overrides if item not in malformed and key_of[item] not in dapo_only_keys]
    try:
        SkyRLTrainConfig.from_cli_overrides(core)
    except Exception as exc:  # SkyRL raises ValueError/AssertionError naming the field
        errors.append(f"SkyRLTrainConfig rejects the core overrides: {type(exc).__name__}: {exc}")

    dapo_cls, source = dapo_config_class()
    dapo_values: dict = {}
    try:
        cfg = dapo_cls.from_cli_overrides([item for item in overrides if item not in malformed])
        for key in dapo_only_keys:
            name = key[len(DAPO_KEY_PREFIX) :] if key.startswith(DAPO_KEY_PREFIX) else key
            if not key.startswith(DAPO_KEY_PREFIX) or name not in DAPO_FIELDS:
                errors.append(f"{key} is listed as DAPO-only but the DAPO config has no such field")
                continue
            value = getattr(cfg.trainer.algorithm, name)
            expected = DAPO_FIELDS[name][0]
            if not isinstance(value, expected) or isinstance(value, bool):
                errors.append(f"{key}={value!r} is {type(value).__name__}, DAPO expects {expected.__name__}")
            dapo_values[key] = value
        if validate:
            from skyrl.train.utils.utils import validate_cfg

            validate_cfg(cfg)
    except Exception as exc:
        errors.append(f"DAPO config ({source}) rejects the overrides: {type(exc).__name__}: {exc}")
    return {"ok": not errors, "errors": errors, "dapo_keys": dapo_values, "dapo_source": source}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    validate = "--validate" in args
    args = [a for a in args if a != "--validate"]
    dapo_keys: list[str] = []
    if args and args[0].startswith("--dapo-only="):
        dapo_keys = [k for k in args.pop(0).split("=", 1)[1].split(",") if k]
    result = check(args, dapo_keys, validate=validate)
    print(json.dumps(result, default=str))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
