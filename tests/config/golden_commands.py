"""The container commands recorded in tests/config/golden/: how each is rendered, shared by the test that
compares them (test_runtime.py) and the command that rewrites them on purpose (update_golden.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

from beam_slurm.config.container import ContainerSettings, Mount, same_path_mounts
from beam_slurm.config.container_runtime import command_prefix, default_container_name, srun_container_args

GOLDEN = Path(__file__).resolve().parent / "golden"

# Values a shell would mangle if any element were spliced in unquoted: spaces, both quotes, $, backticks, globs, ;.
TRICKY_DIR = "/shared/run's \"dir\" $HOME `id` *;x"
TRICKY_COMMAND = ["python", "-c", "import sys; print(sys.argv[1:])", "a b", "$PATH", "'q'", '"dq"', "`id`", "*", ";"]


def tricky_settings(runtime: str, image: str) -> ContainerSettings:
    return ContainerSettings(
        runtime=runtime,
        image=image,
        mounts=["/etc/hostname:/host name$1:ro", f"{TRICKY_DIR}/extra:/opt/extra"],
        workdir=f"{TRICKY_DIR}/work",
        root_filesystem="writable",
        env_passthrough=["PYTHONPATH", "HF_HOME"],
        overlay="/shared/over lay$.img" if runtime == "apptainer" else "",
    )


def job_mounts() -> list[Mount]:
    return same_path_mounts(read_only=["/shared/models/beam 501B", f"{TRICKY_DIR}/data"], writable=[f"{TRICKY_DIR}/out"])


def rendered_pyxis() -> list[str]:
    settings = tricky_settings("pyxis", "ghcr.io/example/skyrl:beam-release")
    args = srun_container_args(settings, job_mounts(), container_name=default_container_name("4711"))
    return ["srun", "--nodes=2", "--ntasks-per-node=1", *args, *command_prefix(settings, job_mounts()), *TRICKY_COMMAND]


def rendered_apptainer() -> list[str]:
    settings = tricky_settings("apptainer", "/shared/images/sky rl's $x.sif")
    prefix = command_prefix(settings, job_mounts())
    return ["srun", "--nodes=2", "--ntasks-per-node=1", *srun_container_args(settings, job_mounts()), *prefix, *TRICKY_COMMAND]


#: golden file name -> its renderer
RENDERERS = {"pyxis_srun.sh": rendered_pyxis, "apptainer_srun.sh": rendered_apptainer}


def golden_text(name: str) -> str:
    """What the golden file `name` must hold: the rendered command as one shell line."""
    return shlex.join(RENDERERS[name]()) + "\n"


def golden_mismatch(name: str, golden_dir: Path = GOLDEN) -> str | None:
    """Why the golden file `name` does not match the rendering (None when it does). Reads only, whatever the
    environment says: rewriting is `update_golden.py`'s job alone."""
    path = golden_dir / name
    if not path.is_file():
        return f"{path} is missing"
    if path.read_text() != golden_text(name):
        return f"rendered command differs from {path}"
    return None
