"""What the batch shell tells the nodes and the driver of one attempt: ``<attempt dir>/job_spec.json``, written just
before the Ray step starts; ``BEAM_ATTEMPT_DIR`` names the folder. Without the folder or its file (a node started by
an evaluation task, or by hand) every field takes its default.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beam_slurm.config.ray import RaySettings
from beam_slurm.core.atomic_files import write_json

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig

SPEC_FILE = "job_spec.json"
SCHEMA_VERSION = 1


@dataclass
class JobSpec:
    """The settings of one attempt that the nodes and the driver need (no secret: the auth token is a file)."""

    ray: RaySettings = field(default_factory=RaySettings)
    gpus_per_node: int | None = None  # GPUs every node must show; None: not checked
    log_copy: LogCopySettings | None = None  # None: the schema's defaults
    env_manifest: dict[str, Any] | None = None  # `env_manifest.describe`: names, patterns, file paths
    sigterm_notice: bool = False  # hold a first SIGTERM that may be a preemption's only notice (a save fits)
    # After the driver fails, how long the head keeps the cluster up for the batch shell's warm restart; 0: it ends.
    restart_wait_s: float = 0.0
    # Bring-up timing for ray_ready.json: the batch shell's start, the preflight, the Ray step's launch.
    job_start_time: float | None = None
    preflight_window: tuple[float, float] | None = None
    ray_step_launch_time: float | None = None
    schema_version: int = SCHEMA_VERSION

    def write(self, attempt_dir: str | os.PathLike[str]) -> Path:
        path = Path(attempt_dir) / SPEC_FILE
        write_json(path, dataclasses.asdict(self))
        return path

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> JobSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        given = {key: value for key, value in values.items() if key in known}
        if given.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise ValueError(
                f"{SPEC_FILE}: schema_version {given['schema_version']} is not {SCHEMA_VERSION}; the "
                "nodes run another beam-slurm than the batch shell (set BEAM_SLURM_HOME to one checkout)"
            )
        given["ray"] = RaySettings.from_mapping(given.get("ray") or {})
        if given.get("log_copy") is not None:
            given["log_copy"] = LogCopySettings(**given["log_copy"])
        if given.get("preflight_window") is not None:
            given["preflight_window"] = tuple(given["preflight_window"])
        return cls(**given)

    @classmethod
    def read(cls, attempt_dir: str | os.PathLike[str] | None) -> JobSpec:
        """The attempt's spec; the defaults when there is no folder or no file in it."""
        if not attempt_dir:
            return cls()
        try:
            text = (Path(attempt_dir) / SPEC_FILE).read_text()
        except FileNotFoundError:
            return cls()
        return cls.from_mapping(json.loads(text))

    def log_copy_settings(self) -> LogCopySettings:
        return self.log_copy if self.log_copy is not None else LogCopySettings.schema_defaults()


@dataclass
class LogCopySettings:
    """How a node copies its Ray logs (cluster.log_copy_interval_s, cluster.log_copy_max_mbytes, cluster.log_copy_s)."""

    interval_s: float
    max_bytes: int
    final_s: float

    @classmethod
    def from_config(cls, cfg: BeamConfig) -> LogCopySettings:
        c = cfg.cluster
        return cls(
            interval_s=float(c.log_copy_interval_s),
            max_bytes=int(c.log_copy_max_mbytes * 1024 * 1024),
            final_s=float(c.log_copy_s),
        )

    @classmethod
    def schema_defaults(cls) -> LogCopySettings:
        """The schema's settings, for a node started without the batch shell's job spec."""
        # Deferred: only a node started without the batch shell reads the schema, and the schema brings Hydra
        # (~0.5 s) into every node's start.
        from beam_slurm.config.schema import BeamConfig

        return cls.from_config(BeamConfig())
