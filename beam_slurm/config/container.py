"""Container settings: which runtime runs the Ray processes and the driver, from which image, with which mounts."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field

from beam_slurm.config.choices import ContainerRuntime, ContainerRuntimeField, RootFilesystem, RootFilesystemField

RUNTIMES = typing.get_args(ContainerRuntime)
ROOT_FILESYSTEM_MODES = typing.get_args(RootFilesystem)


@dataclass
class ContainerSettings:
    """How the Ray head, the Ray workers and the driver are containerised on every node."""

    runtime: ContainerRuntimeField = "none"
    """`none` runs on the host (the venv or modules must provide SkyRL); `pyxis` adds `--container-*` options to
    every `srun` step (pyxis/enroot SPANK plugin); `apptainer` prefixes every command with `apptainer exec --nv`."""

    image: str = ""
    """The recipe's SkyRL image: a registry reference (`ghcr.io/org/skyrl:beam-release`, optionally pinned with
    `@sha256:...`) or a local image file (`.sqsh` for pyxis, `.sif` for Apptainer). A registry reference is
    replaced by the file `beam-slurm pull-container` imported into `image_cache_dir`, when that file exists, so the
    nodes never pull from the registry themselves. Never put a password in it: registry credentials go through the
    runtime's own files (enroot: ~/.config/enroot/.credentials; Apptainer: `apptainer registry login`)."""

    image_cache_dir: str = ""
    """Directory on shared storage (same path on every node) where `pull-container` imports the image once, as
    `<name>.sqsh` (pyxis) or `<name>.sif` (Apptainer), with a `<name>.<ext>.digest.json` record beside it.
    Empty: registry references are pulled by each node at job start (slow, N registry pulls)."""

    mounts: list[str] = field(default_factory=list)
    """Extra bind mounts, each `host_path:container_path` or `host_path:container_path:ro`. The job's own paths
    (model, data, outputs/checkpoints, node-local scratch, the SkyRL checkout, this checkout) are mounted at the
    same path inside the container by the caller, so every path in the config means the same file on both sides;
    list here only what else the container needs. Paths must be absolute and contain no `:` or `,`."""

    workdir: str = ""
    """Working directory inside the container (pyxis `--container-workdir`, Apptainer `--pwd`). Empty: the
    runtime's default (the image's WORKDIR for pyxis, the current directory for Apptainer)."""

    root_filesystem: RootFilesystemField = "default"
    """Whether processes may write to the image's own filesystem: `default` (the runtime's setting: enroot is
    usually writable, a SIF read-only), `writable` (pyxis `--container-writable`; Apptainer `--writable-tmpfs`,
    changes lost at exit), or `readonly` (pyxis `--container-readonly`). Writes that matter belong in mounts."""

    overlay: str = ""
    """Apptainer only: an overlay image layered read-only over the SIF (e.g. extra packages). Read-only because
    Apptainer lets a single process at a time open an overlay for writing, and every node mounts it."""

    mount_home: bool = False
    """Bind the user's home directory into the container. Off by default so dotfiles and ~/.local site-packages on
    the host cannot shadow the image's Python packages (pyxis `--no-container-mount-home`, Apptainer `--no-home`)."""

    env_passthrough: list[str] = field(default_factory=list)
    """Names of job-wide host environment variables whose host value must win over a value the image's own ENV
    sets (e.g. PYTHONPATH, HF_HOME). Both runtimes already pass the task's environment (SLURM_*, CUDA_VISIBLE_DEVICES,
    RAY_*) into the container when the image does not set the same name. Forwarded by name only (pyxis
    `--container-env=NAME,...`; Apptainer `APPTAINERENV_NAME` set in the launching process's environment, so list
    only variables with the same value on every task), so no value ever appears on a command line."""

    lock_stale_after_s: float = 120.0
    """`pull-container`: take over the import lock on shared storage when its holder (on another node) sent no
    heartbeat for this long; a holder on this node that is gone is taken over at once."""

    lock_timeout_s: float = 6 * 3600.0
    """`pull-container`: give up waiting for a live holder of the import lock after this long (then exit 1)."""

    def __post_init__(self) -> None:
        # OmegaConf hands over ListConfig; keep plain lists so the settings are picklable and comparable.
        self.mounts = [str(m) for m in self.mounts]
        self.env_passthrough = [str(n) for n in self.env_passthrough]


@dataclass(frozen=True)
class Mount:
    """One bind mount from the host into the container."""

    host_path: str  # absolute, on the host (shared storage or node-local)
    container_path: str  # absolute, inside the container; usually the same as host_path
    read_only: bool = False  # model weights, data, code

    def spec(self) -> str:
        """`host:container[:ro]`, the form both pyxis and Apptainer accept."""
        return f"{self.host_path}:{self.container_path}{':ro' if self.read_only else ''}"


def parse_mount(spec: str) -> Mount:
    """`host:container[:ro|:rw]` (a bare `path`: the same on both sides) as a Mount; ValueError saying what is wrong."""
    parts = spec.split(":")
    if len(parts) == 1:
        return Mount(parts[0], parts[0])
    if len(parts) == 2:
        return Mount(parts[0], parts[1])
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        return Mount(parts[0], parts[1], read_only=parts[2] == "ro")
    raise ValueError(f"{spec!r} is not host_path:container_path[:ro] (a path may not contain ':')")


def same_path_mounts(
    read_only: list[str] | tuple[str, ...] = (), writable: list[str] | tuple[str, ...] = ()
) -> list[Mount]:
    """Each host path once, at the same path inside the container (writable when given both ways)."""
    paths = dict.fromkeys(path for path in [*writable, *read_only] if path)
    return [Mount(path, path, read_only=path not in writable) for path in paths]
