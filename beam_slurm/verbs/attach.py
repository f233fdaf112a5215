"""`beam-slurm attach RUN [--node NAME] [-- CMD ...]`: a shell (or CMD) inside a running training job, as one more step
of its allocation (`srun --overlap`) in its container, with its Ray address and token set (docs: guides/operations.md,
"`attach`"). A job that is not running, or whose Ray head has not written `ray_head.json` yet, is refused (exit 2)."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.verb_args import VerbArgs, VerbUsageError
from beam_slurm.core.atomic_files import read_json
from beam_slurm.core.layout import CONFIG_FILE, RUN_DIRNAME
from beam_slurm.core.ray_records import HEAD_FILE
from beam_slurm.jobs.training.job_settings import job_mounts
from beam_slurm.jobs.training.steps import ContainerHook, container_hook
from beam_slurm.launch import runs
from beam_slurm.launch.runs import RunJob, find_job
from beam_slurm.slurm import scheduler

ATTACH_STEP = "attach"  # the step's name in `squeue --steps`


class AttachRefused(Exception):
    """The job cannot be attached to now; the message says why and what to do."""


@dataclass
class Target:
    """Where and with what the attach step runs."""

    job_id: str
    attempt: str
    node: str
    nodes: list[str]
    head: dict


def running_target(job: RunJob, node: str | None) -> Target:
    """The running attempt, its head and the node to attach to, or AttachRefused saying why not."""
    try:
        info = scheduler.job_info(job.job_id)
    except scheduler.SlurmCommandError as exc:
        raise AttachRefused(
            f"job {job.job_id} is not running (Slurm no longer knows it: {exc}); "
            f"`beam-slurm logs {job.job_id}` shows what it left"
        ) from None
    state = info.get("JobState", "")
    if state != "RUNNING":
        why = f"; {info['Reason']}" if info.get("Reason") not in (None, "", "None") else ""
        raise AttachRefused(
            f"job {job.job_id} is {state.lower() or 'unknown'}{why}: attach needs a running job "
            f"(`beam-slurm status {job.export_path}`, `beam-slurm logs {job.job_id}`)"
        )
    restarts = info.get("Restarts", "0") if info.get("Restarts", "0").isdigit() else "0"
    # The allocation's latest Ray step: an in-job restart (`2.1`) runs in the folder of its label.
    attempt = ([a for a in job.attempts() if a.split(".")[0] == restarts] or [restarts])[-1]
    head = read_json(job.attempt_dir(attempt) / HEAD_FILE)
    if head is None or str(head.get("job_id")) != job.job_id:
        raise AttachRefused(
            f"job {job.job_id} runs, but the Ray head of attempt {attempt} has not started yet (no "
            f"{job.attempt_dir(attempt) / HEAD_FILE}); try again once `beam-slurm logs "
            f"{job.job_id}` shows the head up"
        )
    nodes = (
        scheduler.expand_hostnames(info.get("NodeList", "")) if info.get("NodeList") else list(head.get("nodes") or [])
    )
    chosen = node or str(head["host"])
    if nodes and chosen not in nodes:
        raise AttachRefused(f"--node {chosen}: not a node of job {job.job_id}; its nodes are {', '.join(nodes)}")
    return Target(job.job_id, attempt, chosen, nodes, head)


def ray_environment(head: dict, environ: dict[str, str], python_bin: str | None) -> dict[str, str]:
    """The attach step's environment: the job's Ray address and token file, no enclosing job's SLURM_* variables."""
    env = {k: v for k, v in environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    env["RAY_ADDRESS"] = str(head["address"])
    if head.get("token_path"):
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(head["token_path"]))
    if python_bin:
        env["PATH"] = python_bin + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    return env


def attach_argv(target: Target, command: list[str], hook, *, shell: str) -> list[str]:
    """The srun command line of the attach step (`hook`: the job's `steps.ContainerHook`)."""
    argv = [
        "srun",
        "--overlap",
        f"--jobid={target.job_id}",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={target.node}",
        f"--job-name={ATTACH_STEP}",
        *([] if command else ["--pty"]),
    ]  # a shell of its own is interactive
    return argv + list(hook.srun_args) + list(hook.command_prefix) + (command or [shell, "-i"])


def container_hook_of(job: RunJob):
    """The job's container hook, from the run's resolved recipe (beam_run/config.yaml); none without a container."""
    try:
        cfg = saved_config(job.export_path)
    except Exception as exc:  # a record this version cannot read: say so, attach outside any container
        print(
            f"beam-slurm attach: warning: cannot read the run's recipe ({exc}); attaching without its container",
            file=sys.stderr,
        )
        cfg = None
    none = cfg is None or cfg.container.runtime == "none"
    return (ContainerHook() if none else container_hook(cfg.container, job_mounts(cfg), job.job_id)), cfg


def saved_config(export_path: Path):
    """The run's resolved recipe as a typed BeamConfig, None when the run folder has none."""
    path = export_path / RUN_DIRNAME / CONFIG_FILE
    if not path.is_file():
        return None
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(BeamConfig), OmegaConf.load(path)))


def build_parser():
    args = VerbArgs(
        "attach",
        "beam-slurm attach RUN [--node NAME] [-- CMD ...]: a shell (or CMD) on a node of a running "
        "training job, inside its allocation and container, with its Ray address and token set (`ray "
        "status` works).\n\nRUN: the run folder (its export path), its run name, or the training job's "
        "id.",
        settings=False,
        inputs="RUN [-- CMD ...]",
    )
    args.add_argument("run", metavar="RUN", help="run folder, run name or training job id")
    args.add_argument("--node", help="node to attach to (default: the Ray head's node)")
    args.add_argument("--exports-root", help="where run names are looked up (default $BEAM_EXPORTS_ROOT or ~/exports)")
    return args


def main(argv: list[str], *, execute=None) -> int:
    """Parse, resolve, then replace this process with the srun step (`execute(argv, env)`; tests pass their own)."""
    argv, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (list(argv), [])
    parser = build_parser()
    try:
        args = parser.parse(argv).args
        job = find_job(args.run, args.exports_root)
        target = running_target(job, args.node)
        hook, cfg = container_hook_of(job)
    except (VerbUsageError, runs.RunNotFound, AttachRefused, scheduler.SlurmCommandError) as exc:
        return parser.fail(exc)
    in_container = bool(hook.srun_args or hook.command_prefix)
    env = ray_environment(target.head, dict(os.environ), None if in_container else str(Path(sys.executable).parent))
    env.update(hook.env)
    shell = "/bin/bash" if in_container else (os.environ.get("SHELL") or "/bin/bash")
    srun = attach_argv(target, command, hook, shell=shell)
    where = "the Ray head" if target.node == target.head.get("host") else "a Ray worker"
    print(
        f"{parser.prefix}job {target.job_id} attempt {target.attempt}, {target.node} ({where}), "
        f"RAY_ADDRESS={env['RAY_ADDRESS']}: {shlex.join(srun)}",
        file=sys.stderr,
        flush=True,
    )
    if execute is None:
        os.execvpe(srun[0], srun, env)
    return int(execute(srun, env) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
