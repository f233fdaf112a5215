"""Compose `conf/` with Hydra, type it with the schema, fill derived defaults, validate.

Hydra's compose API is used (not `@hydra.main`) so every verb can load the same recipe from a plain argv; only the
public APIs of Hydra and OmegaConf are used (compose, the override parser, OmegaConf's merge, select and update)."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import Field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_origin, get_type_hints

import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    GrammarParseError,
    InterpolationResolutionError,
    OmegaConfBaseException,
)

from beam_slurm import CONF_DIR
from beam_slurm.config import profiles
from beam_slurm.config.overrides import escape_values
from beam_slurm.config.schema import BeamConfig, ClusterConfig
from beam_slurm.config.sources import ProfileSource
from beam_slurm.config.validation import validate_config
from beam_slurm.core.errors import ConfigError, ConfigProblem

_ENV_REF = re.compile(r"^\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,.*)?\}$", re.S)
# YAML 1.1's words for true and false: OmegaConf reads them back as booleans, so text spelled so is quoted.
_YAML_BOOL = re.compile(r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$")
_ENV_PROBLEMS_SEEN: dict[tuple[tuple[str, str, str], ...], tuple[ConfigProblem, ...]] = {}


def compose(
    overrides: list[str], *, config_dir: Path = CONF_DIR, environ: Mapping[str, str] | None = None
) -> tuple[DictConfig, profiles.Profile | None]:
    """Return the composed (untyped) DictConfig for `overrides` and the site profile they (or BEAM_SLURM_CLUSTER)
    name, composed in; a bad override -> ConfigError naming it."""
    _register_schema()
    env = os.environ if environ is None else environ
    named = any(o.split("=", 1)[0].lstrip("+") == profiles.GROUP for o in overrides)
    overrides = with_profile(overrides, env)
    # The user's profiles folder after conf/ (Hydra reads the first NAME.yaml it finds); named only where it is,
    # since Hydra warns of a search path that is not there.
    user_dir = profiles.user_config_dir(env)
    where = str(user_dir).replace("\\", "\\\\").replace("'", "\\'")
    search = [f"hydra.searchpath=['file://{where}']"] if user_dir.is_dir() else []
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3", job_name="beam-slurm"):
            cfg = hydra_compose(config_name="config", overrides=[*(_mapping_override(o) for o in overrides), *search])
    except MissingConfigException as exc:
        raise ConfigError([_missing_group_problem(exc, overrides, config_dir, env, from_env=not named)]) from None
    except (ConfigCompositionException, OverrideParseException) as exc:
        raise ConfigError([_override_problem(exc, overrides)]) from None
    profile = _profile(overrides, env)
    if profile is not None:
        # The environment outranks the profile: what conf/config.yaml reads from a variable that is set comes back.
        references = _env_references(config_dir)
        for key in _env_over_profile(profile, overrides, env, references):
            OmegaConf.update(cfg, key, references[key][1], merge=False)
    return cfg, profile


def with_profile(overrides: list[str], environ: Mapping[str, str]) -> list[str]:
    """`overrides` with `cluster=NAME` added from BEAM_SLURM_CLUSTER when they name no profile themselves."""
    if any(o.split("=", 1)[0].lstrip("+") == profiles.GROUP for o in overrides):
        return list(overrides)
    name = profiles.selected_name(overrides, environ)
    return [*overrides, f"{profiles.GROUP}={name}"] if name else list(overrides)


def _profile(overrides: list[str], environ: Mapping[str, str]) -> profiles.Profile | None:
    name = profiles.selected_name(overrides, environ)
    return profiles.find(name, environ) if name else None


@functools.cache
def _env_references(config_dir: Path) -> dict[str, tuple[str, str]]:
    """key -> (variable, the `${oc.env:...}` text) of every value conf/config.yaml reads from the environment."""
    raw = yaml.safe_load((config_dir / "config.yaml").read_text()) or {}
    found = ((key, value, _ENV_REF.match(value)) for key, value in profiles.leaves(raw) if isinstance(value, str))
    return {key: (match.group(1), value) for key, value, match in found if match}


def _command_line_keys(overrides: list[str]) -> set[str]:
    return {o.split("=", 1)[0].lstrip("+~").strip() for o in overrides if _is_value_override(o)}


def _env_over_profile(
    profile: profiles.Profile, overrides: list[str], environ: Mapping[str, str], references: dict[str, tuple[str, str]]
) -> list[str]:
    """The keys the profile sets that a variable set in the environment (and not the command line) decides."""
    given = _command_line_keys(overrides)
    return [key for key in profile.values if key in references and references[key][0] in environ and key not in given]


def profile_source(
    profile: profiles.Profile | None, overrides: list[str], environ: Mapping[str, str], config_dir: Path = CONF_DIR
) -> ProfileSource | None:
    """The selected profile and the keys whose value it gave (not the command line's, not a variable's)."""
    if profile is None:
        return None
    overruled = set(_command_line_keys(overrides)) | set(
        _env_over_profile(profile, overrides, environ, _env_references(config_dir))
    )
    return ProfileSource(profile.name, str(profile.path), tuple(k for k in profile.values if k not in overruled))


@functools.cache
def _register_schema() -> None:
    """Make the schema the base of conf/config.yaml, once per process (storing it takes ~0.1 s)."""
    ConfigStore.instance().store(name="beam_schema", node=BeamConfig)


def load_config(
    overrides: list[str] | None = None,
    *,
    validate: bool = True,
    check_paths: bool = False,
    environ: Mapping[str, str] | None = None,
) -> BeamConfig:
    """Compose, type-check and (by default) validate the recipe. Raises ConfigError listing every problem."""
    unknown = key_problems(list(overrides or []))
    if unknown:
        raise ConfigError(unknown)
    env = os.environ if environ is None else environ
    cfg, profile = compose(list(overrides or []), environ=env)
    return _typed(
        cfg,
        validate=validate,
        check_paths=check_paths,
        environ=env,
        profile=profile_source(profile, list(overrides or []), env),
    )


def load_many(override_lists: list[list[str]]) -> list[BeamConfig | ConfigError]:
    """`load_config(overrides, validate=False)` for each list (a sweep's points): a config or its ConfigError.
    Each distinct set of group overrides is composed once; value overrides go onto a copy, as Hydra applies them."""
    parser = OverridesParser.create()
    composed: dict[tuple[str, ...], tuple[DictConfig, profiles.Profile | None] | ConfigError] = {}
    out: list[BeamConfig | ConfigError] = []
    for overrides in override_lists:
        overrides = list(overrides)
        try:
            unknown = key_problems(overrides)
            if unknown:
                raise ConfigError(unknown)
            groups = tuple(o for o in overrides if not _is_value_override(o))
            if groups not in composed:
                try:
                    composed[groups] = compose(list(groups))
                except ConfigError as exc:
                    composed[groups] = exc
            base = composed[groups]
            if isinstance(base, ConfigError):
                raise base
            cfg = copy.deepcopy(base[0])
            values = [_mapping_override(o) for o in overrides if _is_value_override(o)]
            try:
                _apply_values(parser.parse_overrides(values), cfg)
            except (ConfigCompositionException, OverrideParseException) as exc:
                raise ConfigError([_override_problem(exc, overrides)]) from None
            profile = profile_source(base[1], overrides, os.environ)
            out.append(_typed(cfg, validate=False, check_paths=False, environ=os.environ, profile=profile))
        except ConfigError as exc:
            out.append(exc)
    return out


def _apply_values(overrides: list[Override], cfg: DictConfig) -> None:
    """Apply parsed value overrides to a composed config as compose's last step does, through OmegaConf's public
    select and update: `~key` deletes, `+key` adds (refused where a value is), `++key` adds or sets, `key` sets.
    A failure is a ConfigCompositionException whose text names the override, as compose's own."""
    for ov in overrides:
        key, value = ov.key_or_group, ov.value()
        if ov.package is not None:
            raise ConfigCompositionException(
                f"Override {ov.input_line} looks like a config group override, but config group '{key}' does not exist."
            )
        try:
            if ov.is_delete():
                current = OmegaConf.select(cfg, key, throw_on_missing=False)
                if current is None:
                    raise ConfigCompositionException(f"Could not delete from config. '{key}' does not exist.")
                if value is not None and value != current:
                    raise ConfigCompositionException(
                        f"Could not delete from config. The value of '{key}' is {current} and not {value}."
                    )
                parent, _, name = key.rpartition(".")
                with open_dict(cfg):
                    del (OmegaConf.select(cfg, parent) if parent else cfg)[name]
            elif ov.is_add() and not (
                OmegaConf.select(cfg, key, throw_on_missing=False) is None or isinstance(value, (dict, list))
            ):
                raise ConfigCompositionException(
                    f"Could not append to config. An item is already at '{key}'.\n"
                    f"Either remove + prefix: '{(ov.input_line or '')[1:]}'\n"
                    f"Or add a second + to add or override '{key}': '+{ov.input_line}'\n"
                )
            elif ov.is_add() or ov.is_force_add():
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                try:
                    OmegaConf.update(cfg, key, value, merge=True)
                except (ConfigAttributeError, ConfigKeyError) as exc:
                    raise ConfigCompositionException(
                        f"Could not override '{key}'.\nTo append to your config use +{ov.input_line}"
                    ) from exc
        except OmegaConfBaseException as exc:
            raise ConfigCompositionException(f"Error merging override {ov.input_line}") from exc


def schema_fields(cls: type = BeamConfig, prefix: str = "") -> Iterator[tuple[str, type, Field[Any], Any]]:
    """(dotted key, dataclass, field, default) of every setting below `cls` in schema order, sections first."""
    for f in fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        yield prefix + f.name, cls, f, default
        if is_dataclass(default):
            yield from schema_fields(type(default), f"{prefix}{f.name}.")


@functools.lru_cache(maxsize=1)
def _schema_names() -> tuple[tuple[str, ...], frozenset[str], frozenset[str]]:
    """(every leaf key in schema order, every section, every mapping whose entries are the user's:
    trainer.extra_env)."""
    found = list(schema_fields())
    leaves = [(key, cls, f, default) for key, cls, f, default in found if not is_dataclass(default)]
    mappings = {
        key
        for key, cls, f, default in leaves
        if isinstance(default, dict) or get_origin(get_type_hints(cls).get(f.name)) is dict
    }
    return (
        tuple(key for key, *_ in leaves),
        frozenset(key for key, *_, default in found if is_dataclass(default)),
        frozenset(mappings),
    )


def parse_overrides(overrides: list[str]) -> list[Override]:
    """Hydra's parsed overrides; a syntax error becomes a ConfigError naming the override."""
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            parsed.extend(parser.parse_overrides([text]))
        except OverrideParseException as exc:
            first = str(exc).splitlines()[0]
            raise ConfigError(
                [
                    ConfigProblem(
                        text.split("=", 1)[0],
                        text,
                        f"cannot parse this override ({first}); quote values with commas or spaces: key='a,b'",
                    )
                ]
            ) from None
    return parsed


def has_sweep(overrides: list[str]) -> list[str]:
    """The overrides (as typed) that Hydra reads as a sweep (`key=a,b`, `range(...)`, `choice(...)`)."""
    return [str(o.input_line) for o in parse_overrides(overrides) if o.is_sweep_override()]


def key_problems(overrides: list[str]) -> list[ConfigProblem]:
    """Each override of a key the schema does not have, with the nearest known name (`+key=` only in open mappings)."""
    leaves, sections, mappings = _schema_names()
    found = []
    for text in overrides:
        if not _is_value_override(text):
            continue
        key = text.split("=", 1)[0].lstrip("+~").strip()
        if "/" in key or key in leaves or key in sections or any(key.startswith(m + ".") for m in mappings):
            continue
        parent = key.rpartition(".")[0]
        if parent and parent not in sections and not any(parent == m or parent.startswith(m + ".") for m in mappings):
            parts = key.split(".")
            first_unknown = next(p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p not in sections)
            near = difflib.get_close_matches(first_unknown, sorted(sections), n=1, cutoff=0.6)
            top_level = ", ".join(sorted(s for s in sections if "." not in s))
            fix = (
                f"{first_unknown!r} is not a section; did you mean {near[0]!r}?"
                if near
                else f"{first_unknown!r} is not a section; the sections are {top_level}"
            )
        else:
            near = difflib.get_close_matches(key, sorted(leaves), n=1, cutoff=0.6)
            siblings = [k.rpartition(".")[2] for k in leaves if k.rpartition(".")[0] == parent]
            fix = (
                f"unknown key; valid keys in {parent}: {', '.join(siblings)}"
                if parent
                else "unknown key (`beam-slurm plan --help` lists them)"
            )
            fix += f"; did you mean {near[0]!r}?" if near else ""
        found.append(ConfigProblem(key, text.split("=", 1)[1] if "=" in text else None, fix))
    return found


def _is_value_override(override: str) -> bool:
    """`key=value` (with +, ++ or ~) on a setting, not a config group (`recipe=...`, `cluster=NAME`: a group name
    alone; `cluster.partition=...` is the section's key) nor Hydra's own (`hydra.*`)."""
    key = override.split("=", 1)[0].lstrip("+~").strip()
    head = key.split(".", 1)[0].split("@", 1)[0]
    return bool(key) and "@" not in key and head != "hydra" and not ("." not in key and (CONF_DIR / key).is_dir())


def _typed(
    cfg: DictConfig,
    *,
    validate: bool,
    check_paths: bool,
    environ: Mapping[str, str],
    profile: ProfileSource | None = None,
) -> BeamConfig:
    """A composed config typed with the schema, its environment sources recorded, derived defaults filled."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    sources = _env_sources(raw, environ)
    bad_env = _env_value_problems(sources, environ)
    if bad_env:
        raise ConfigError(bad_env)
    try:
        typed = OmegaConf.merge(_schema_node(), cfg)  # merge copies its first argument
        obj: BeamConfig = OmegaConf.to_object(typed)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise ConfigError([_value_problem(exc, raw)]) from None
    # Read back by env_sources() and profile_of(); not dataclass fields, so never part of the recipe.
    vars(obj)["_env_sources"] = sources
    vars(obj)["_profile"] = profile
    fill_defaults(obj, environ=environ)
    if validate:
        validate_config(obj, check_paths=check_paths)
    return obj


@functools.lru_cache(maxsize=1)
def _schema_node() -> DictConfig:
    """The schema as an OmegaConf node, built once per process (never modified: merge and update work on copies)."""
    node: DictConfig = OmegaConf.structured(BeamConfig)
    return node


def fill_defaults(cfg: BeamConfig, *, environ: Mapping[str, str]) -> None:
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
    if cfg.cluster.time_limit is None:  # conf/ reads SBATCH_TIMELIMIT, null when unset: the schema's default then
        cfg.cluster.time_limit = ClusterConfig().time_limit


class _RecipeDumper(yaml.Dumper):  # type: ignore[misc]  # yaml has no type information here
    """Writes text as OmegaConf.to_yaml does: quoted where OmegaConf would read it back as a number or a boolean."""


def _represent_text(dumper: yaml.Dumper, text: str) -> yaml.ScalarNode:
    try:
        float(text)  # every whole number parses too
        looks_typed = True
    except ValueError:
        looks_typed = bool(_YAML_BOOL.match(text))
    return dumper.represent_scalar(
        yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG, text, style="'" if looks_typed else None
    )


_RecipeDumper.add_representer(str, _represent_text)


def to_yaml(cfg: BeamConfig) -> str:
    """The resolved recipe as YAML, to save beside a job; `${` is escaped so it reads back to the same values."""
    # Dumped without building an OmegaConf node first: a third of the time of OmegaConf.to_yaml, the same text.
    text: str = yaml.dump(
        escape_values(dataclasses.asdict(cfg)),
        default_flow_style=False,
        allow_unicode=True,
        sort_keys=False,
        Dumper=_RecipeDumper,
    )
    return text


def _mapping_override(override: str) -> str:
    """`trainer.extra_env={A: x}` becomes `++...`: struct mode refuses names a mapping does not have yet."""
    key = override.split("=", 1)[0]
    if "=" in override and not key.startswith(("+", "~")) and key in _schema_names()[2]:
        return "++" + override
    return override


def valid_keys(section: str = "") -> list[str]:
    """Dotted keys the schema accepts under `section` ('' = top level)."""
    node: object = BeamConfig
    for part in filter(None, section.split(".")):
        match = next((f for f in fields(node) if f.name == part), None) if is_dataclass(node) else None
        node = match.default_factory if match and callable(match.default_factory) else None
    return [f.name for f in fields(node)] if is_dataclass(node) else []


def _env_sources(raw: Any, environ: Mapping[str, str]) -> dict[str, str]:
    """key -> variable for every value conf/ reads with `${oc.env:NAME,default}` while NAME is set."""
    matches = ((key, _ENV_REF.match(value)) for key, value in profiles.leaves(raw) if isinstance(value, str))
    return {key: match.group(1) for key, match in matches if match and match.group(1) in environ}


def _env_value_problems(sources: dict[str, str], environ: Mapping[str, str]) -> list[ConfigProblem]:
    """Every value read from the environment that does not fit its setting's type, each naming its variable."""
    if not sources:
        return []
    memo_key = tuple((key, name, environ[name]) for key, name in sources.items())
    if memo_key in _ENV_PROBLEMS_SEEN:  # the same variables and values: the same answer (a sweep asks per point)
        return list(_ENV_PROBLEMS_SEEN[memo_key])
    probe = OmegaConf.structured(BeamConfig)
    found = []
    for key, name in sources.items():
        text = environ[name]
        try:
            # Only the type is probed here: `${` is escaped, as oc.env hands the text over without resolving it.
            OmegaConf.update(probe, key, text.replace("${", "\\${"), merge=False)
        except OmegaConfBaseException:
            found.append(ConfigProblem(key, text, f"expected {describe_type(key)}; fix or unset {name}", env=name))
    _ENV_PROBLEMS_SEEN[memo_key] = tuple(found)
    return found


def _raw_value(raw: Any, key: str) -> Any:
    node = raw
    for part in re.split(r"\.|\[(\d+)\]", key):
        if not part:
            continue
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, TypeError, ValueError):
            return None
    return node


def _value_problem(exc: Exception, raw: Any) -> ConfigProblem:
    """A value that does not fit the schema, said in our words (the underlying library's text stays out)."""
    key = str(getattr(exc, "full_key", "") or "")
    value = _raw_value(raw, key) if key else None
    if isinstance(exc, (InterpolationResolutionError, GrammarParseError)) or (isinstance(value, str) and "${" in value):
        return ConfigProblem(
            key or "config",
            value,
            "'${' starts a reference to another setting and this one does not "
            "resolve; for a literal '${' write '\\${' (in the shell: key='...\\${...}')",
        )
    if not key:
        return ConfigProblem("config", None, "a value does not fit its setting; see beam_slurm/config/schema.py")
    return ConfigProblem(key, value, f"expected {describe_type(key)}{_comma_hint(key, value)}")


def _comma_hint(key: str, value: object) -> str:
    """Hydra reads an unquoted comma as a sweep (a list in brackets): a partition list is text to quote."""
    if "," not in str(value):
        return ""
    if describe_type(key) != "text":
        return f"; a comma outside quotes is Hydra's sweep: add -m to sweep {key} over {str(value).strip('[]')}"
    quoted = f"{key}='{str(value).strip('[]')}'"
    return (
        f"; a comma outside quotes is Hydra's sweep (with -m) or list: for one value with commas, such as Slurm's "
        f'partition list, quote it ({quoted}; in the shell "{quoted}")'
    )


def describe_type(key: str) -> str:
    """The schema type of dotted `key`, in words (`a whole number`, `true or false`, ...)."""
    node: object = BeamConfig
    for part in filter(None, re.split(r"\.|\[\d+\]", key)):
        origin = typing.get_origin(node)
        if is_dataclass(node):
            hints = typing.get_type_hints(node)
            if part not in hints:
                return "a value of the type beam_slurm/config/schema.py gives"
            node = hints[part]
        elif origin in (dict, list):  # a mapping's or a list's items
            node = typing.get_args(node)[-1]
        node = _without_none(node)[0]
    return _type_words(node, key)


def _without_none(hint: Any) -> tuple[Any, bool]:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:  # Optional[X] or X | None
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else hint), True
    return hint, False


def _type_words(hint: Any, key: str) -> str:
    base, optional = _without_none(hint)
    origin = typing.get_origin(base)
    if is_dataclass(base):
        words = f"a section: set its keys one by one, e.g. {key}.{fields(base)[0].name}=..."
    elif origin is list or base is list:
        words = "a list, e.g. ['a','b']"
    elif origin is dict or base is dict:
        words = "a mapping, e.g. {NAME: value}"
    else:
        words = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}.get(base, str(base))
    return f"{words} (or null for empty)" if optional else words


def read_back_problems(
    overrides: list[str], expected: typing.Mapping[str, object], variables: typing.Mapping[str, str]
) -> list[ConfigProblem]:
    """The job's own parse of its arguments (`load_config`, as `beam-slurm train` runs it in the batch shell): a
    problem for each `expected` key it does not read back exactly, or for the arguments it cannot read at all, naming
    the key's environment variable (`variables`). `submit` runs this before it submits, so what it accepts the job
    accepts."""
    try:
        cfg = load_config(list(overrides), validate=False)
    except ConfigError as exc:
        found = [p for p in exc.problems if p.key in expected] or exc.problems
        return [_passing_on_problem(p.key, expected.get(p.key, p.value), variables, str(p)) for p in found]
    out = []
    for key, value in expected.items():
        section, _, name = key.rpartition(".")
        got = getattr(getattr(cfg, section) if section else cfg, name)
        if got != value:
            out.append(_passing_on_problem(key, value, variables, f"the job would read {got!r}"))
    return out


def _passing_on_problem(key: str, value: object, variables: typing.Mapping[str, str], why: str) -> ConfigProblem:
    variable = variables.get(key)
    where = f"set {variable} (or {key})" if variable else f"set {key}"
    return ConfigProblem(
        key,
        value,
        f"{where} to a value of letters, digits and / . _ - + @ % : only",
        problem=f"the training job cannot be given {value!r}: {why}",
        env=variable,
    )


def _unparsable(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar cannot read, if any."""
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException:
            return override
    return None


def _override_problem(exc: Exception, overrides: list[str]) -> ConfigProblem:
    bad = _unparsable(overrides)
    if bad is not None:
        key, _, given = bad.partition("=")
        return ConfigProblem(
            key.lstrip("+~") or bad,
            given or None,
            "cannot parse this override; quote the value (key='...') or avoid spaces and ;",
        )
    text = str(exc)
    # The override Hydra complains about: its full text first, else its key, quoted or bare.
    culprit = next((ov for ov in overrides if ov in text), None)
    culprit = culprit or next((ov for ov in overrides if ov.split("=", 1)[0].lstrip("+~") in text), None)
    if culprit is None:
        return ConfigProblem(
            "overrides",
            " ".join(overrides),
            "cannot apply these overrides; use key=value with keys from beam_slurm/config/schema.py",
        )
    key, _, rest = culprit.partition("=")
    key, value = key.lstrip("+~"), rest if "=" in culprit else None
    section, _, name = key.rpartition(".")
    keys = valid_keys(section)
    if keys and name not in keys:
        return ConfigProblem(
            key, value, f"unknown key; valid keys{' in ' + section if section else ''}: {', '.join(keys)}"
        )
    if not keys and section and not valid_keys(section.rpartition(".")[0]):
        return ConfigProblem(key, value, "unknown key; see the keys in beam_slurm/config/schema.py")
    return ConfigProblem(key, value, f"expected {describe_type(key)}{_comma_hint(key, value)}")


def _missing_group_problem(
    exc: Exception, overrides: list[str], config_dir: Path, environ: Mapping[str, str], *, from_env: bool = False
) -> ConfigProblem:
    """An unknown recipe, site profile (or other config group option), by the name the user gave."""
    match = re.search(r"Could not find '([^'/]+)/([^']+)'", str(exc))
    group, name = (match.group(1), match.group(2)) if match else ("recipe", None)
    given = [ov.split("=", 1)[1] for ov in overrides if ov.split("=", 1)[0].lstrip("+") == group and "=" in ov]
    if group == profiles.GROUP:
        folders = " or ".join(str(d) for d in profiles.search_dirs(environ))
        return ConfigProblem(
            group,
            name,
            f"no site profile {name!r} in {folders}; choose one of: {', '.join(profiles.names(environ)) or '(none)'}"
            f", or write one with `beam-slurm doctor --write {name}`",
            env=profiles.SELECT_ENV if from_env else None,
        )
    options = sorted(p.stem for p in (config_dir / group).glob("*.yaml"))
    what = "recipe" if group == "recipe" else f"{group} option"
    return ConfigProblem(group, given[-1] if given else name, f"unknown {what}; choose one of: {', '.join(options)}")
