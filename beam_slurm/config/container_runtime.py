"""Command rendering for the container runtimes: pyxis/enroot (`srun --container-*`), Apptainer (`apptainer exec`)
and `none` (the host). Everything returns argv lists, never a shell string. Apptainer runs without `--cleanenv`:
srun's per-task variables (SLURM_PROCID, CUDA_VISIBLE_DEVICES, RAY_*) must reach the container. Host variables never
override the image's unless listed in `env_passthrough`, and home is not mounted unless asked (~/.local would shadow
the image's packages).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from beam_slurm.config.container import ROOT_FILESYSTEM_MODES, RUNTIMES, ContainerSettings, Mount, parse_mount
from beam_slurm.core.errors import ConfigProblem

IMAGE_SUFFIX = {"pyxis": ".sqsh", "apptainer": ".sif"}
LOCAL_IMAGE_SUFFIXES = {"pyxis": (".sqsh", ".squashfs"), "apptainer": (".sif", ".sqsh", ".squashfs", ".img")}
DIGEST_RECORD_SUFFIX = ".digest.json"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A registry reference: registry/path:tag or ...@sha256:<hex>; `#` separates the registry in enroot's form.
_IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:#]*(@sha256:[0-9a-f]{64})?$")


def is_local_image(image: str) -> bool:
    """True when `image` names a file (path or image-file suffix) rather than a registry reference."""
    return image.startswith(("/", "./", "../", "~")) or image.endswith((".sqsh", ".squashfs", ".sif", ".img"))


def docker_reference(image: str) -> str:
    """The registry reference in Docker's form (`registry/path:tag`), from either Docker's or enroot's form."""
    return image.removeprefix("docker://").replace("#", "/", 1)


def enroot_reference(image: str) -> str:
    """The reference in enroot's form, registry host separated by `#` (`nvcr.io#nvidia/pytorch:24.01`)."""
    ref = docker_reference(image)
    first, sep, rest = ref.partition("/")
    return f"{first}#{rest}" if sep and ("." in first or ":" in first or first == "localhost") else ref


def image_file_name(image: str, runtime: str) -> str:
    """The imported image's file name: `ghcr.io/org/skyrl:beam-release` -> `ghcr.io+org+skyrl+beam-release.sqsh`."""
    return re.sub(r"[^A-Za-z0-9._\-]+", "+", docker_reference(image)).strip("+.") + IMAGE_SUFFIX[runtime]


def cached_image_path(settings: ContainerSettings) -> Path | None:
    """Where the pull stage puts the registry image for this runtime, or None (local image or no cache dir)."""
    if (
        settings.runtime not in IMAGE_SUFFIX
        or not settings.image
        or not settings.image_cache_dir
        or is_local_image(settings.image)
    ):
        return None
    return Path(settings.image_cache_dir) / image_file_name(settings.image, settings.runtime)


def digest_record_path(image_path: Path) -> Path:
    """The record written beside an imported image once it is complete."""
    return image_path.with_name(image_path.name + DIGEST_RECORD_SUFFIX)


def resolved_image(settings: ContainerSettings) -> str:
    """The image the runtime gets: a local file, else the pulled file once complete, else the reference."""
    if is_local_image(settings.image):
        return settings.image
    cached = cached_image_path(settings)
    if cached is not None and cached.is_file() and digest_record_path(cached).is_file():
        return str(cached)
    return (
        "docker://" + docker_reference(settings.image)
        if settings.runtime == "apptainer"
        else enroot_reference(settings.image)
    )


def default_container_name(job_id: str) -> str:
    """Per-job pyxis container name: steps of one job share the unpacked container, jobs never do."""
    return f"beam-slurm-{job_id}"


def _all_mounts(settings: ContainerSettings, mounts: Sequence[Mount]) -> list[Mount]:
    merged: dict[str, Mount] = {}
    for mount in [*mounts, *(parse_mount(m) for m in settings.mounts)]:
        merged.setdefault(mount.container_path, mount)  # first one wins: the job's own paths before the extras
    return list(merged.values())


def srun_container_args(settings: ContainerSettings, mounts: Sequence[Mount], *, container_name: str = "") -> list[str]:
    """Options to add to every `srun` of the job (pyxis; [] otherwise); `container_name` shares one unpacked
    container."""
    if settings.runtime != "pyxis":
        return []
    args = [f"--container-image={resolved_image(settings)}"]
    all_mounts = _all_mounts(settings, mounts)
    if all_mounts:
        args.append("--container-mounts=" + ",".join(m.spec() for m in all_mounts))
    if settings.workdir:
        args.append(f"--container-workdir={settings.workdir}")
    args.append("--container-mount-home" if settings.mount_home else "--no-container-mount-home")
    if container_name:
        args.append(f"--container-name={container_name}")
    if settings.root_filesystem == "writable":
        args.append("--container-writable")
    elif settings.root_filesystem == "readonly":
        args.append("--container-readonly")
    if settings.env_passthrough:
        args.append("--container-env=" + ",".join(settings.env_passthrough))
    return args


def command_prefix(settings: ContainerSettings, mounts: Sequence[Mount]) -> list[str]:
    """What goes before the command on each task (Apptainer: `apptainer exec --nv ... IMAGE`); [] otherwise."""
    if settings.runtime != "apptainer":
        return []
    prefix = ["apptainer", "exec", "--nv"]
    if not settings.mount_home:
        prefix.append("--no-home")
    if settings.workdir:
        prefix += ["--pwd", settings.workdir]
    if settings.root_filesystem == "writable":
        prefix.append("--writable-tmpfs")
    if settings.overlay:
        prefix += ["--overlay", f"{settings.overlay}:ro"]
    for mount in _all_mounts(settings, mounts):
        prefix += ["--bind", mount.spec()]
    prefix.append(resolved_image(settings))
    return prefix


def container_environment(settings: ContainerSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """Variables for the process that launches the steps: Apptainer's `APPTAINERENV_<NAME>` for env_passthrough."""
    if settings.runtime != "apptainer":
        return {}
    return {f"APPTAINERENV_{name}": environ[name] for name in settings.env_passthrough if name in environ}


_PATH_RULES: tuple[
    tuple[Callable[[str], bool], str, str], ...
] = (  # (whether a path breaks it, what is wrong, the fix)
    (lambda path: not path.startswith("/"), "is not an absolute path", "give the full path, starting with /"),
    (
        lambda path: "," in path,
        "contains ',', which the runtimes use to separate mounts",
        "use a path without commas (a symlink works)",
    ),
    (
        lambda path: ":" in path,
        "contains ':', which separates host, container path and options",
        "use a path without colons (a symlink works)",
    ),
    (lambda path: any(c in path for c in "\n\r\0"), "contains a control character", "use a plain path"),
)


def _path_problems(key: str, path: str, what: str) -> list[ConfigProblem]:
    return [
        ConfigProblem(key, problem=f"{what} {path!r} {wrong}", fix=fix)
        for breaks, wrong, fix in _PATH_RULES
        if breaks(path)
    ]


def _image_problems(settings: ContainerSettings) -> list[ConfigProblem]:
    image, runtime = settings.image, settings.runtime
    files = " or ".join(LOCAL_IMAGE_SUFFIXES[runtime])
    if not image:
        return [
            ConfigProblem(
                "container.image",
                problem=f"runtime {runtime!r} needs an image",
                fix="set container.image=<registry reference> (then run `beam-slurm pull-container`) or "
                f"the path of a {files} file, or container.runtime=none",
            )
        ]
    if is_local_image(image):
        problems = _path_problems("container.image", image, "image file")
        if not image.endswith(LOCAL_IMAGE_SUFFIXES[runtime]):
            problems.append(
                ConfigProblem(
                    "container.image",
                    problem=f"{image!r} is not an image file {runtime} can run",
                    fix=f"give a {files} file, or a registry reference",
                )
            )
        return problems
    user_part = image.removeprefix("docker://").split("/", 1)[0]
    if "@" in user_part and not user_part.startswith("sha256:"):
        return [
            ConfigProblem(
                "container.image",
                problem="the image reference carries credentials (user@ or user:password@)",
                fix="remove them; put registry credentials in "
                "~/.config/enroot/.credentials (enroot) or use `apptainer registry login` (Apptainer)",
            )
        ]
    if not _IMAGE_REF.match(image.removeprefix("docker://")):
        return [
            ConfigProblem(
                "container.image",
                problem=f"{image!r} is not a registry reference (registry/path:tag or ...@sha256:<64 hex>)",
                fix="give e.g. ghcr.io/org/skyrl:beam-release, or an absolute path to a local image file",
            )
        ]
    return []


def pyxis_available() -> bool:
    """True when this host's srun has the pyxis plugin loaded (its options appear in `srun --help`)."""
    srun = shutil.which("srun")
    if srun is None:
        return False
    try:
        out = subprocess.run([srun, "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--container-image" in out.stdout + out.stderr


def validate(
    settings: ContainerSettings, mounts: Sequence[Mount] = (), *, on_cluster: bool = False
) -> list[ConfigProblem]:
    """Every problem with the settings and the job's mounts; `on_cluster` also what exists only where the job runs."""
    if settings.runtime not in RUNTIMES:
        return [
            ConfigProblem(
                "container.runtime",
                problem=f"unknown runtime {settings.runtime!r}",
                fix=f"use one of {', '.join(RUNTIMES)}",
            )
        ]
    problems: list[ConfigProblem] = []
    if settings.root_filesystem not in ROOT_FILESYSTEM_MODES:
        problems.append(
            ConfigProblem(
                "container.root_filesystem",
                problem=f"unknown mode {settings.root_filesystem!r}",
                fix=f"use one of {', '.join(ROOT_FILESYSTEM_MODES)}",
            )
        )

    def both_ends(key: str, mount: Mount) -> list[ConfigProblem]:
        return _path_problems(key, mount.host_path, "host path") + _path_problems(
            key, mount.container_path, "container path"
        )

    for i, spec in enumerate(settings.mounts):
        try:
            problems += both_ends(f"container.mounts[{i}]", parse_mount(spec))
        except ValueError as err:
            problems.append(
                ConfigProblem(
                    f"container.mounts[{i}]",
                    problem=str(err),
                    fix="write host_path:container_path or host_path:container_path:ro",
                )
            )
    for mount in mounts:
        problems += both_ends(f"job mount {mount.host_path!r}", mount)
    for i, name in enumerate(settings.env_passthrough):
        if not _ENV_NAME.match(name):
            problems.append(
                ConfigProblem(
                    f"container.env_passthrough[{i}]",
                    problem=f"{name!r} is not an environment variable name",
                    fix="list names only (letters, digits, _), never NAME=value",
                )
            )
    if settings.workdir:
        problems += _path_problems("container.workdir", settings.workdir, "workdir")
    if settings.image_cache_dir:
        problems += _path_problems("container.image_cache_dir", settings.image_cache_dir, "cache directory")
    if settings.overlay:
        if settings.runtime != "apptainer":
            problems.append(
                ConfigProblem(
                    "container.overlay",
                    problem=f"overlays are an Apptainer feature, runtime is {settings.runtime!r}",
                    fix="clear container.overlay or use container.runtime=apptainer",
                )
            )
        problems += _path_problems("container.overlay", settings.overlay, "overlay")
    if settings.runtime == "none":
        return problems
    problems += _image_problems(settings)
    if on_cluster:
        if settings.runtime == "pyxis" and not pyxis_available():
            problems.append(
                ConfigProblem(
                    "container.runtime",
                    problem="srun on this host has no pyxis plugin (no --container-image in `srun --help`)",
                    fix="run where pyxis is installed, or use container.runtime=apptainer or none",
                )
            )
        if settings.runtime == "apptainer" and shutil.which("apptainer") is None:
            problems.append(
                ConfigProblem(
                    "container.runtime",
                    problem="`apptainer` is not on PATH",
                    fix="load the "
                    "Apptainer module (e.g. `module load apptainer`) or use container.runtime=pyxis "
                    "or none",
                )
            )
        if settings.image and is_local_image(settings.image) and not os.path.isfile(settings.image):
            problems.append(
                ConfigProblem(
                    "container.image",
                    problem=f"image file {settings.image!r} does not exist on this node",
                    fix="check the path is on shared storage, or run `beam-slurm pull-container`",
                )
            )
    return problems
