"""The training job inside its allocation: validate the settings, read the allocation, run this attempt
(`beam_slurm.slurm.attempt`), whose end `beam_slurm.slurm.requeue_policy` decides.

`python -m beam_slurm.slurm.train_job [--no-preflight] [overrides] -- DRIVER ARGV...` runs another Ray driver under
the same job settings: the benchmarks and the Ray-on-Slurm tests use it with their own drivers.
"""

from __future__ import annotations

import os
import sys

from beam_slurm.config.errors import ConfigError, ConfigProblem
from beam_slurm.slurm import scheduler
from beam_slurm.slurm.attempt import Attempt
from beam_slurm.slurm.job_settings import TrainJobSettings, job_settings, load_job_config


def run(settings: TrainJobSettings) -> int:
    """Validate, then run this attempt inside the current allocation; the job's exit status."""
    problems = settings.problems()
    if problems:
        ConfigError(problems).report()
        return 2
    try:
        allocation = scheduler.allocation_from_env()
    except scheduler.SlurmCommandError as exc:
        print(f"beam-slurm train: {exc}", file=sys.stderr)
        return 2
    if settings.nodes > len(allocation.nodes):
        ConfigError([ConfigProblem("cluster.nodes", settings.nodes, f"the allocation has {len(allocation.nodes)} "
                                   f"nodes; submit with --nodes={settings.nodes}")]).report()
        return 2
    return Attempt(settings, allocation).run()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        ConfigError([ConfigProblem("driver", argv, "put the driver command after `--`: python -m "
                                   "beam_slurm.slurm.train_job [key=value ...] -- python -m ...")]).report()
        return 2
    split = argv.index("--")
    overrides, driver = argv[:split], argv[split + 1:]
    preflight = "--no-preflight" not in overrides
    overrides = [o for o in overrides if o != "--no-preflight"]
    try:
        cfg = load_job_config(overrides, os.environ)
    except ConfigError as exc:
        exc.report()
        return exc.exit_code
    settings, _ = job_settings(cfg, preflight=preflight, driver=driver)
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
