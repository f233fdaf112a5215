"""Site profiles: what a cluster fixes once (partition, account, QOS, constraint, container, network variables, setup
lines, what `beam-slurm doctor` measured), kept as `# @package _global_` files of the Hydra group `cluster`.

Searched in the repository's `conf/cluster/` first, then in the user's folder: `$BEAM_SLURM_CONFIG_DIR/cluster/`, else
`$XDG_CONFIG_HOME/beam-slurm/cluster/`, else `~/.config/beam-slurm/cluster/`. Selected with `cluster=NAME` on the
command line or `BEAM_SLURM_CLUSTER=NAME` in the environment; none is used unless one is named. Precedence, highest
first: the command line, the environment (sbatch's SBATCH_* and the other variables conf/config.yaml reads), the
profile, the recipe, the schema's defaults."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from beam_slurm import CONF_DIR
from beam_slurm.core.atomic_files import write_text
from beam_slurm.core.errors import ConfigError, ConfigProblem

GROUP = "cluster"
SELECT_ENV = "BEAM_SLURM_CLUSTER"
"""Names the profile when the command line does not (`cluster=NAME` wins)."""
CONFIG_DIR_ENV = "BEAM_SLURM_CONFIG_DIR"
"""The user's beam-slurm folder (its `cluster/` holds the profiles); default `$XDG_CONFIG_HOME/beam-slurm`."""
HEADER = "# @package _global_\n"


class ProfileExists(ConfigError):
    """`doctor --write NAME` where a profile of that name is (on disk, or in the repository, which would shadow it)."""


def user_config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The user's beam-slurm folder: BEAM_SLURM_CONFIG_DIR, else $XDG_CONFIG_HOME/beam-slurm, else ~/.config/..."""
    env = os.environ if environ is None else environ
    if env.get(CONFIG_DIR_ENV):
        return Path(env[CONFIG_DIR_ENV]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base).expanduser() / "beam-slurm"


def search_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where `cluster=NAME` is looked up, in Hydra's order (the first holding NAME.yaml wins)."""
    return [CONF_DIR / GROUP, user_config_dir(environ) / GROUP]


def names(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every profile name that can be selected."""
    return sorted({p.stem for d in search_dirs(environ) for p in d.glob("*.yaml")})


@dataclass(frozen=True)
class Profile:
    """The selected profile: its name, its file and the leaves it sets (dotted key -> value)."""

    name: str
    path: Path
    values: dict[str, Any] = field(default_factory=dict)


def selected_name(overrides: list[str], environ: Mapping[str, str] | None = None) -> str | None:
    """The profile `overrides` name (`cluster=NAME`, the last one), else BEAM_SLURM_CLUSTER, else None."""
    given = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == GROUP and "=" in o]
    if given:
        return given[-1] or None
    env = os.environ if environ is None else environ
    return env.get(SELECT_ENV) or None


def find(name: str, environ: Mapping[str, str] | None = None) -> Profile | None:
    """The profile file Hydra will read for `cluster=NAME` and its leaves; None when no folder has it."""
    path = next((d / f"{name}.yaml" for d in search_dirs(environ) if (d / f"{name}.yaml").is_file()), None)
    if path is None:
        return None
    loaded = yaml.safe_load(path.read_text()) or {}
    return Profile(name, path, dict(leaves(loaded)) if isinstance(loaded, dict) else {})


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a mapping; a list is one leaf."""
    if isinstance(node, dict) and node:
        for name, value in node.items():
            yield from leaves(value, f"{prefix}.{name}" if prefix else str(name))
    elif prefix:
        yield prefix, node


def nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys -> the nested mapping a YAML file holds."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def writable_path(name: str, *, force: bool = False, environ: Mapping[str, str] | None = None) -> Path:
    """Where `write_profile` would write NAME; ProfileExists for a name it refuses: not a plain file name, one the
    repository's profiles take (Hydra would read theirs first), or the user's existing NAME without `force`."""
    if not name or "/" in name or name.startswith(".") or name != name.strip():
        raise ProfileExists(
            [ConfigProblem("--write", name, "a profile name is a plain file name: letters, digits, - and _")]
        )
    if (CONF_DIR / GROUP / f"{name}.yaml").is_file():
        raise ProfileExists(
            [ConfigProblem("--write", name, f"the repository's {CONF_DIR / GROUP} has {name!r}; choose another name")]
        )
    path = user_config_dir(environ) / GROUP / f"{name}.yaml"
    if path.exists() and not force:
        raise ProfileExists(
            [ConfigProblem("--write", name, f"{path} exists; add --force to replace it, or choose another name")]
        )
    return path


def write_profile(
    name: str,
    values: Mapping[str, Any],
    *,
    force: bool = False,
    header: str = "",
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Write `values` (dotted recipe key -> value) as the user's profile NAME (`writable_path` says what it refuses)."""
    path = writable_path(name, force=force, environ=environ)
    path.parent.mkdir(parents=True, exist_ok=True)
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    body = yaml.safe_dump(nested(values), default_flow_style=False, sort_keys=False, allow_unicode=True)
    write_text(path, HEADER + comment + body)
    return path
