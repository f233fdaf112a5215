"""One environment for every node and every Ray worker of a job: the environment manifest.

The manifest names the variables the driver and every Ray worker on every node must see: `trainer.env_inherit` (names
or `PREFIX_*` patterns from the environment the job was submitted with), the recipe's own variables
(`skyrl.command.skyrl_env`) and `trainer.env_secret_files` (NAME -> a file holding the value, read on each node).

The job spec carries the manifest's description (never a value); each node resolves it before `ray start`, so the
raylet and every worker it spawns inherit it (a variable set only in the driver never reaches a worker on another
node, SkyRL PR 1406). Secrets travel only by inheritance or by file: a secret value in `trainer.extra_env` or
`ray.extra_env` is refused before anything is submitted, and every rendering shows `<set>` instead.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beam_slurm.core.atomic_files import write_json
from beam_slurm.core.errors import ConfigProblem

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig

MASK = "<set>"  # shown in place of a secret value
RECORD_DIR = "env"  # per-node records in the attempt's log folder: env/<node>.json

_SECRET_WORDS = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_FILE_SUFFIXES = ("_PATH", "_FILE", "_DIR")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def is_secret(name: str) -> bool:
    """True for a variable whose value must never be printed or written (HF_TOKEN, WANDB_API_KEY, ...)."""
    upper = name.upper()
    return bool(_SECRET_WORDS.search(upper)) and not upper.endswith(_FILE_SUFFIXES)


def masked(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with every secret value replaced by `<set>` (for display)."""
    return {name: (MASK if is_secret(name) else value) for name, value in env.items()}


def problems(cfg: BeamConfig) -> list[ConfigProblem]:
    """Secret values written into the recipe, bad names and unreadable secret files; each names its key."""
    found: list[ConfigProblem] = []
    for section, extra in (("trainer.extra_env", cfg.trainer.extra_env), ("ray.extra_env", cfg.ray.extra_env)):
        for name in extra:
            if is_secret(name):
                found.append(
                    ConfigProblem(
                        f"{section}.{name}",
                        MASK,
                        f"a secret is never written into the recipe (it would reach the run's "
                        f"config.yaml and logs): export {name} in the shell that submits the job "
                        f"(it is inherited), or put it in a file readable only by you and set "
                        f"trainer.env_secret_files.{name}=/path/to/file",
                    )
                )
    for pattern in cfg.trainer.env_inherit:
        if not _NAME.match(str(pattern)):
            found.append(
                ConfigProblem(
                    "trainer.env_inherit", pattern, "use variable names or PREFIX_* patterns (letters, digits, _)"
                )
            )
    for name, path in cfg.trainer.env_secret_files.items():
        if not _NAME.match(name) or name.endswith("*"):
            found.append(ConfigProblem(f"trainer.env_secret_files.{name}", path, "use a variable name as the key"))
        elif not path or not os.path.isabs(str(path)):
            found.append(
                ConfigProblem(
                    f"trainer.env_secret_files.{name}",
                    path,
                    "use an absolute path on storage every node sees, readable only by you",
                )
            )
    return found


def describe(cfg: BeamConfig, recipe_env: Mapping[str, str]) -> dict[str, Any]:
    """The manifest's description for the job spec: names, patterns and file paths, no value."""
    return {
        "inherit": list(cfg.trainer.env_inherit),
        "set": sorted(recipe_env),
        "secret_files": dict(cfg.trainer.env_secret_files),
    }


class ManifestError(RuntimeError):
    """A secret file named by the manifest cannot be read on this node."""


def resolve(spec: Mapping[str, Any] | None, environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """On a node: (the manifest's variables with their values here, the names it lists that are unset here)."""
    if not spec:
        return {}, []
    inherit = list(spec.get("inherit") or [])
    values = {name: value for name, value in environ.items() if any(fnmatch.fnmatchcase(name, p) for p in inherit)}
    values.update({name: environ[name] for name in spec.get("set") or [] if name in environ})
    for name, path in sorted((spec.get("secret_files") or {}).items()):
        try:
            values[name] = Path(path).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ManifestError(
                f"trainer.env_secret_files.{name}={path}: cannot read it on this node "
                f"({exc.strerror}); put the file on storage every node sees"
            ) from None
    return values, [name for name in spec.get("set") or [] if name not in environ]


def record(attempt_dir: Path | None, host: str, values: Mapping[str, str], missing: list[str]) -> None:
    """Write `<attempt dir>/env/<host>.json`: every exported name, secrets as `<set>`."""
    if attempt_dir is None:
        return
    write_json(
        attempt_dir / RECORD_DIR / f"{host}.json",
        {"exported": masked(dict(sorted(values.items()))), "missing": sorted(missing)},
    )


def summary(values: Mapping[str, str]) -> str:
    """One log line's worth: names with values, secrets as `<set>`."""
    shown = masked(dict(sorted(values.items())))
    return ", ".join(f"{name}={value}" for name, value in shown.items()) or "nothing"
