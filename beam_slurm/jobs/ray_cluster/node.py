"""One Ray node of a job: `python -m beam_slurm.jobs.ray_cluster.node -- DRIVER ARGV...`, run by ONE srun step over all
nodes with one task per node; rank 0 is the `head.Head`, every other rank a `worker.Worker`. SIGTERM stops the driver
and this job's Ray on the node, nothing else (a first one may be held as a preemption's notice); USR1/USR2 are the
batch shell's. Outputs in BEAM_ATTEMPT_DIR: `records`, the Ray logs in ray/<node>/, the environment in env/<node>.json.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

from beam_slurm.config.ray import RaySettings
from beam_slurm.core.logs import installed
from beam_slurm.core.ray_records import EXIT_INFRA, EXIT_SETUP, NodeFailure
from beam_slurm.jobs.ray_cluster.context import NodeContext
from beam_slurm.jobs.ray_cluster.head import Head
from beam_slurm.jobs.ray_cluster.role import NodeRole
from beam_slurm.jobs.ray_cluster.worker import Worker

logger = logging.getLogger(__spec__.name)  # its package name under `python -m` too (__name__ is "__main__")


def install_signal_handlers(role: NodeRole) -> None:
    """SIGTERM/SIGINT set the role's stop flag (but for a held first SIGTERM); USR1/USR2 are logged only."""

    def on_stop(signum: int, _frame: Any) -> None:
        if signum == signal.SIGTERM and role.hold_sigterm():
            logger.info("SIGTERM held: it may be a preemption's notice (the head asks Slurm; a second one stops)")
            return
        role.stop_requested = True

    def on_notice(signum: int, _frame: Any) -> None:
        logger.info(f"ignoring signal {signal.Signals(signum).name} (the batch shell handles notices)")

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, on_notice)
    signal.signal(signal.SIGUSR2, on_notice)


def run_node(ctx: NodeContext, settings: RaySettings, driver: list[str]) -> int:
    """This node's part of the step, start to teardown; the task's exit status."""
    role: Head | Worker = Head(ctx, settings) if ctx.rank == 0 else Worker(ctx, settings)
    role.restore_signal_handlers = lambda: install_signal_handlers(role)
    install_signal_handlers(role)
    with installed("beam_slurm", role.prefix):
        ending = "failure"
        try:
            role.stop_leftovers_of_earlier_attempts()
            role.export_manifest()
            status = role.run(driver) if isinstance(role, Head) else role.run()
            ending = "stop" if role.stop_requested else ("end" if status == 0 else "failure")
            return status
        except NodeFailure as failure:
            role.record_failure(failure.kind, str(failure))
            return EXIT_SETUP if failure.kind == "setup" else EXIT_INFRA
        except OSError as exc:
            role.record_failure("setup", f"node {ctx.host}: {exc}")
            return EXIT_SETUP
        finally:
            role.ray.stop()
            # After Ray stopped, so its last lines are in; bounded by cluster.log_copy_s (the notice budget's share).
            role.log_copier.finish(ending)
            role.ray.remove()  # the job's folder on the node, Ray's temp dir with it


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    try:
        ctx = NodeContext.from_env()
        settings = ctx.spec.ray.validate()
    except Exception as exc:  # printed for the user; the batch shell sees the status
        print(f"ray-node: {exc}", file=sys.stderr)
        return EXIT_SETUP
    if ctx.rank == 0 and not argv:
        print(
            "ray-node: no driver command; usage: python -m beam_slurm.jobs.ray_cluster.node -- DRIVER ARGV...",
            file=sys.stderr,
        )
        return 2
    return run_node(ctx, settings, argv)


if __name__ == "__main__":
    sys.exit(main())
