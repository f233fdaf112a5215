"""The job's srun steps: how each is containerised and its command line (the Ray steps: `ray_steps`)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from beam_slurm.config import container_runtime as runtime
from beam_slurm.config.container import ContainerSettings, Mount
from beam_slurm.slurm import scheduler

logger = logging.getLogger(__name__)
STOP_AFTER_SRUN_TERM_S = 30.0  # srun got SIGTERM: how long before it is killed


@dataclass
class ContainerHook:
    """How each srun step is containerised: options for srun and a prefix for the task's command."""

    srun_args: list[str] = field(default_factory=list)  # added to every srun (pyxis)
    command_prefix: list[str] = field(default_factory=list)  # before the task's command (Apptainer)
    env: dict[str, str] = field(default_factory=dict)  # srun's environment (APPTAINERENV_*)


def container_hook(container_settings: ContainerSettings | None, mounts: list[Mount], job_id: str) -> ContainerHook:
    """The hook for a `beam_slurm.config.container.ContainerSettings` (runtime none/pyxis/apptainer)."""
    if container_settings is None or getattr(container_settings, "runtime", "none") == "none":
        return ContainerHook()
    return ContainerHook(
        srun_args=runtime.srun_container_args(
            container_settings, mounts, container_name=runtime.default_container_name(job_id)
        ),
        command_prefix=runtime.command_prefix(container_settings, mounts),
        env=runtime.container_environment(container_settings, os.environ),
    )


@dataclass
class StepLauncher:
    """Command lines of this attempt's steps: one task per node on `nodes` nodes, each running `python -m ...`."""

    hook: ContainerHook
    python: str
    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    nodelist: list[str] = field(default_factory=list)  # where the allocation holds more nodes (spares, failed)

    def placement_args(self) -> list[str]:
        """srun options every step of the attempt shares: its nodes (when pinned) and the container's."""
        return ([f"--nodelist={','.join(self.nodelist)}"] if self.nodelist else []) + list(self.hook.srun_args)

    def module_argv(self, module_argv: list[str], *, kill_on_bad_exit: bool, name: str) -> list[str]:
        command = [*self.hook.command_prefix, self.python, "-m", *module_argv]
        return scheduler.srun_per_node(
            self.nodes,
            command,
            cpus_per_task=self.cpus_per_task,
            gpus_per_node=self.gpus_per_node,
            kill_on_bad_exit=kill_on_bad_exit,
            job_name=name,
            extra_args=self.placement_args(),
        )
