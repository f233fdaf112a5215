"""The training job inside its allocation: validate the settings, read the allocation, run this attempt
(`beam_slurm.jobs.training.attempt`), whose end `beam_slurm.policy.requeue` decides. `python -m
beam_slurm.jobs.training.train_job
[--no-preflight] [overrides] -- DRIVER ARGV...` runs another Ray driver under the same job settings: the benchmarks and
the Ray-on-Slurm tests use it with their own drivers."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from beam_slurm.core.errors import ConfigError, ConfigProblem
from beam_slurm.core.layout import IN_JOB_ATTEMPT_ENV
from beam_slurm.jobs.training.attempt import Attempt
from beam_slurm.jobs.training.job_settings import TrainJobSettings, job_settings, load_job_config
from beam_slurm.slurm import scheduler


def run(settings: TrainJobSettings, rebuild: Callable[[], TrainJobSettings] | None = None) -> int:
    """Validate, then run attempts in the current allocation: the first, and a restart in it each time the requeue
    policy says so (`rebuild` makes the settings again, so the driver resumes); the job's exit status."""
    if problems := settings.problems():
        ConfigError(problems).report()
        return 2
    try:
        allocation = scheduler.allocation_from_env()
    except scheduler.SlurmCommandError as exc:
        print(f"beam-slurm train: {exc}", file=sys.stderr)
        return 2
    need = settings.nodes + settings.spare_nodes
    if need > len(allocation.nodes):
        spares = f" + cluster.spare_nodes={settings.spare_nodes}" if settings.spare_nodes else ""
        key = "cluster.spare_nodes" if settings.spare_nodes else "cluster.nodes"
        ConfigError(
            [
                ConfigProblem(
                    key,
                    getattr(settings, key.split(".")[1]),
                    f"the allocation has "
                    f"{len(allocation.nodes)} nodes; cluster.nodes={settings.nodes}{spares} need "
                    f"{need}: submit with --nodes={need}",
                )
            ]
        ).report()
        return 2
    attempt = Attempt(settings, allocation)
    while True:
        status = attempt.run()
        if (decision := attempt.state.restart) is None:
            return status
        before, after = attempt.state.step_nodes, list(decision.next_nodes)
        replaced = [
            f"{old} -> {new}"
            for old, new in zip(
                [n for n in before if n not in after], [n for n in after if n not in before], strict=False
            )
        ]
        os.environ[IN_JOB_ATTEMPT_ENV] = str(attempt.state.in_job + 1)  # the driver's resume and the nodes' labels
        settings = rebuild() if rebuild is not None else settings
        attempt = Attempt(
            settings,
            allocation,
            attempt.state.in_job + 1,
            after,
            attempt.state.allocation_bad + tuple(attempt.state.preflight_failed_nodes),
            replaced,
            attempt.state.notices,
            # A warm restart hands the running cluster over; a cold one starts its own.
            attempt.cluster if attempt.next_plan is not None and attempt.next_plan.warm else None,
            attempt.next_plan,
            attempt.next_restart,
        )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        ConfigError(
            [
                ConfigProblem(
                    "driver",
                    argv,
                    "put the driver command after `--`: python -m "
                    "beam_slurm.jobs.training.train_job [key=value ...] -- python -m ...",
                )
            ]
        ).report()
        return 2
    overrides, driver = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    preflight = "--no-preflight" not in overrides
    overrides = [o for o in overrides if o != "--no-preflight"]
    try:
        cfg = load_job_config(overrides, os.environ)
    except ConfigError as exc:
        exc.report()
        return exc.exit_code
    settings, _ = job_settings(cfg, preflight=preflight, driver=driver)
    return run(
        settings, lambda: job_settings(load_job_config(overrides, os.environ), preflight=preflight, driver=driver)[0]
    )


if __name__ == "__main__":
    sys.exit(main())
