"""Where a loaded recipe's values came from besides the recipe and the command line: the environment variables
conf/config.yaml reads, and the site profile (`cluster=NAME`). The loader (beam_slurm.config.load) records both on the
object it returns; this module reads them without importing the schema's libraries, so the job side may use it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig


@dataclass(frozen=True)
class ProfileSource:
    """The site profile a recipe was loaded with (`cluster=NAME`) and the keys whose value it gave."""

    name: str
    path: str
    keys: tuple[str, ...]


def profile_of(cfg: BeamConfig) -> ProfileSource | None:
    """The site profile of a loaded recipe, None without one (set by beam_slurm.config.load)."""
    return getattr(cfg, "_profile", None)


def measured_keys(cfg: BeamConfig) -> set[str]:
    """Keys whose value the site profile gave as `doctor --probe` measured it (the command line or a variable may
    have overruled the profile: then the value is theirs, not measured)."""
    profile = profile_of(cfg)
    return set(cfg.site.measured) & set(profile.keys) if profile else set()


def env_sources(cfg: BeamConfig) -> dict[str, str]:
    """Keys of a loaded recipe whose value came from an environment variable: key -> variable name (set by
    beam_slurm.config.load on the object it returns)."""
    return dict(getattr(cfg, "_env_sources", None) or {})


def value_source(cfg: BeamConfig, key: str) -> str:
    """Where a key's value came from when neither the recipe nor the command line gave it: `from SBATCH_PARTITION`,
    `profile lab`, `measured, profile lab`; '' otherwise."""
    variable = env_sources(cfg).get(key)
    if variable:
        return f"from {variable}"
    profile = profile_of(cfg)
    if profile is None or key not in profile.keys:
        return ""
    return f"{'measured, ' if key in measured_keys(cfg) else ''}profile {profile.name}"
