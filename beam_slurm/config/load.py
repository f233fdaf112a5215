"""Compose `conf/` with Hydra, type it with the schema, fill derived defaults, validate.

Hydra's compose API is used (not `@hydra.main`) so every verb can load the same recipe from a plain argv.
"""

from __future__ import annotations

import os
from dataclasses import fields, is_dataclass
from pathlib import Path

from beam_slurm import CONF_DIR
from beam_slurm.config.errors import ConfigError, ConfigProblem


def compose(overrides: list[str], *, config_dir: Path = CONF_DIR):
    """Return the composed (untyped) DictConfig for `overrides`; bad override syntax -> ConfigError."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    _register_schema()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3", job_name="beam-slurm"):
            return hydra_compose(config_name="config", overrides=list(overrides))
    except MissingConfigException as exc:
        raise ConfigError([_missing_group_problem(exc, config_dir)]) from None
    except (ConfigCompositionException, OverrideParseException) as exc:
        raise ConfigError([_override_problem(exc, overrides)]) from None


def _register_schema() -> None:
    """Make the schema the base of conf/config.yaml, so Hydra knows every key and its type at compose time."""
    from hydra.core.config_store import ConfigStore

    from beam_slurm.config.schema import BeamConfig

    ConfigStore.instance().store(name="beam_schema", node=BeamConfig)


def load_config(overrides: list[str] | None = None, *, validate: bool = True, environ=None):
    """Compose, type-check and (by default) validate the recipe. Raises ConfigError listing every problem."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from beam_slurm.config.schema import BeamConfig

    cfg = compose(list(overrides or []))
    try:
        typed = OmegaConf.merge(OmegaConf.structured(BeamConfig), cfg)
        obj: BeamConfig = OmegaConf.to_object(typed)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "config"
        msg = str(exc).splitlines()[0]
        raise ConfigError([ConfigProblem(key, _value_of(cfg, key), f"{msg}; see beam_slurm/config/schema.py")]) from None
    fill_defaults(obj, environ=os.environ if environ is None else environ)
    if validate:
        from beam_slurm.config.validation import validate_config

        validate_config(obj)
    return obj


def fill_defaults(cfg, *, environ) -> None:
    """Fill what the seed defines relative to other settings: run name and the $HOME-relative output paths."""
    home = environ.get("HOME", str(Path.home()))
    if not cfg.run_name:
        cfg.run_name = f"beam_{cfg.recipe}"
    if not cfg.paths.ckpt_path:
        cfg.paths.ckpt_path = f"{home}/ckpts/{cfg.run_name}"
    if not cfg.paths.export_path:
        cfg.paths.export_path = f"{home}/exports/{cfg.run_name}"
    if not cfg.paths.log_dir:
        cfg.paths.log_dir = f"{cfg.paths.export_path}/logs"
    if cfg.eval.chain and cfg.checkpoint.hf_save_interval <= 0:
        cfg.checkpoint.hf_save_interval = cfg.checkpoint.interval  # chained evaluations read HF exports
    if cfg.precision == "mxfp8" and cfg.rollout.quantization is None:
        cfg.rollout.quantization = "mxfp8"


def to_yaml(cfg) -> str:
    """The resolved recipe as YAML, to save beside a job so it can be reproduced from its own folder."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def valid_keys(section: str = "") -> list[str]:
    """Dotted keys the schema accepts under `section` ('' = top level)."""
    from beam_slurm.config.schema import BeamConfig

    node = BeamConfig
    for part in filter(None, section.split(".")):
        match = [f for f in fields(node) if f.name == part]
        if not match:
            return []
        node = match[0].default_factory if callable(match[0].default_factory) else None  # type: ignore[arg-type]
        if node is None or not is_dataclass(node):
            return []
    return [f.name for f in fields(node)]


def _value_of(cfg, key: str):
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
    except Exception:  # the value itself may be what failed to resolve
        return None


def _override_problem(exc: Exception, overrides: list[str]) -> ConfigProblem:
    text = str(exc)
    first_line = text.splitlines()[0] if text else type(exc).__name__
    # The override Hydra complains about: its full text first, else its key, quoted or bare.
    culprit = next((ov for ov in overrides if ov in text), None)
    culprit = culprit or next((ov for ov in overrides if ov.split("=", 1)[0].lstrip("+~") in text), None)
    if culprit is None:
        return ConfigProblem("overrides", " ".join(overrides), f"{first_line}; use key=value with keys from beam_slurm/config/schema.py")
    key = culprit.split("=", 1)[0].lstrip("+~")
    value = culprit.split("=", 1)[1] if "=" in culprit else None
    section = key.rsplit(".", 1)[0] if "." in key else ""
    name = key.rsplit(".", 1)[-1]
    keys = valid_keys(section)
    if keys and name not in keys:
        return ConfigProblem(key, value, f"unknown key; valid keys{' in ' + section if section else ''}: {', '.join(keys)}")
    if "LexerNoViableAlt" in text or "mismatched input" in text or "extraneous input" in text:
        return ConfigProblem(key, value, "cannot parse this override; quote the value (key='...') or avoid spaces and ;")
    return ConfigProblem(key, value, f"{first_line}; see the field's type in beam_slurm/config/schema.py")


def _missing_group_problem(exc: Exception, config_dir: Path) -> ConfigProblem:
    recipes = sorted(p.stem for p in (config_dir / "recipe").glob("*.yaml"))
    return ConfigProblem("recipe", None, f"{str(exc).splitlines()[0]}; choose one of: {', '.join(recipes)}")
