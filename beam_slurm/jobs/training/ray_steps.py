"""The job's Ray cluster as the batch shell runs it: one srun step per node (`python -m beam_slurm.jobs.ray_cluster.node
-- DRIVER...`; rank 0 the head, which runs the driver), all named `ray`.

Why a step per node and not one step over every node: a step cannot grow, and `--kill-on-bad-exit` ends every task
of a step when one fails. With a step per node, a node whose Ray died ends its own step only; the head's Ray and the
other raylets stay up, a replacement (a spare, or the same node once its checks pass again) is one more step that
joins the running cluster, and a node left out is stopped alone (`scancel --signal` on its step). The head keeps
running the driver, so a restart of the driver alone needs no step at all (`ray_cluster.head.Head.restart_driver`).
The price: one srun process in the batch shell per node."""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from beam_slurm.jobs.ray_cluster.context import CLUSTER_ENV, NODES_ENV, RANK_ENV
from beam_slurm.jobs.training.steps import STOP_AFTER_SRUN_TERM_S, StepLauncher
from beam_slurm.slurm import scheduler

logger = logging.getLogger(__name__)
RAY_STEP = "ray"  # every Ray node's step's job name (how `scontrol` and `squeue` find them)


@dataclass
class RaySteps:
    """The running cluster's steps, by node; `ranks` in rank order (the head first)."""

    launcher: StepLauncher
    job_id: str
    driver: list[str]
    cluster: str  # CLUSTER_ENV: the bring-up this cluster is (its rendezvous folder); a cold restart is a new one
    ranks: list[str] = field(default_factory=list)
    steps: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    attempt_dirs: list[Path] = field(default_factory=list)  # every attempt folder the nodes were started with

    @property
    def head(self) -> str:
        return self.ranks[0]

    def argv(self, host: str) -> list[str]:
        """The launcher's command line, pinned to `host` alone."""
        one_node = dataclasses.replace(self.launcher, nodes=1, nodelist=[host])
        return one_node.module_argv(
            ["beam_slurm.jobs.ray_cluster.node", "--", *self.driver], kill_on_bad_exit=True, name=RAY_STEP
        )

    def start(self, hosts: list[str] | tuple[str, ...], env: dict[str, str], attempt_dir: Path) -> None:
        """A step on each of `hosts` (each at its place in `ranks`), all at once; own process groups, so a SIGINT
        typed at an interactive salloc shell reaches the batch shell, not srun directly."""
        if attempt_dir not in self.attempt_dirs:
            self.attempt_dirs.append(attempt_dir)
        for host in hosts:
            node_env = {
                **env,
                RANK_ENV: str(self.ranks.index(host)),
                NODES_ENV: ",".join(self.ranks),
                CLUSTER_ENV: self.cluster,
            }
            self.steps[host] = subprocess.Popen(self.argv(host), env=node_env, start_new_session=True)

    def status(self, host: str) -> int | None:
        step = self.steps.get(host)
        return step.poll() if step is not None else None

    def running(self) -> list[str]:
        return [host for host in self.ranks if host in self.steps and self.steps[host].poll() is None]

    def ended_workers(self) -> dict[str, int]:
        """Workers of the cluster whose step ended, with srun's status."""
        return {
            host: status
            for host in self.ranks[1:]
            if host in self.steps and (status := self.steps[host].poll()) is not None
        }

    def stop(self, hosts: list[str] | tuple[str, ...] | None = None, grace_s: float = 30.0) -> int | None:
        """SIGTERM the steps of `hosts` (every running one by default) through Slurm, wait `grace_s` for all, then
        make srun end those left; the head's step status when the head was among them (else None)."""
        wanted = [h for h in (self.ranks if hosts is None else hosts) if h in self.steps]
        live = [h for h in wanted if self.steps[h].poll() is None]
        if live:
            logger.info(f"stopping the Ray step{'s' if len(live) > 1 else ''} on {','.join(live)}")
            # Through Slurm rather than srun's own SIGTERM handling, which ends the tasks after KillWait.
            try:
                ids = scheduler.step_nodes(self.job_id, RAY_STEP)
            except scheduler.SlurmCommandError as exc:
                logger.info(f"could not list the Ray steps ({exc}); terminating their sruns")
                ids = {}
            refused: dict[str, str] = {}
            for host in live:
                if host not in ids:
                    self.steps[host].send_signal(signal.SIGTERM)  # squeue did not answer or list it: srun's own stop
                    continue
                try:
                    scheduler.signal_step(ids[host], "TERM")
                except scheduler.SlurmCommandError as exc:
                    # 22.05's scancel answers "Invalid job id" for a one-node step it did signal: said only if the
                    # step does not stop.
                    refused[host] = str(exc)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(self.steps[h].poll() is None for h in live):
                time.sleep(0.1)
            late = [h for h in live if self.steps[h].poll() is None]
            if late:
                why = "; ".join(f"{h}: {refused[h]}" for h in late if h in refused)
                logger.info(
                    f"the Ray steps on {','.join(late)} did not stop within {grace_s:.0f}s; ending them"
                    + (f" (scancel: {why})" if why else "")
                )
                self.end_sruns(late)
        return self.steps[self.head].poll() if self.head in wanted else None

    def end_sruns(self, hosts: list[str]) -> None:
        for host in hosts:
            self.steps[host].send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_AFTER_SRUN_TERM_S
        while time.monotonic() < deadline and any(self.steps[h].poll() is None for h in hosts):
            time.sleep(0.1)
        for host in hosts:
            if self.steps[host].poll() is None:
                self.steps[host].kill()
                self.steps[host].wait()

    def forget(self, hosts: list[str] | tuple[str, ...]) -> None:
        """Drop the (ended) steps of nodes that leave the cluster."""
        for host in hosts:
            self.steps.pop(host, None)

    def listed_steps(self) -> dict[str, str]:
        """`scheduler.step_nodes` of the Ray steps; {} when squeue does not answer."""
        try:
            return scheduler.step_nodes(self.job_id, RAY_STEP)
        except scheduler.SlurmCommandError:
            return {}

    def step_ids(self) -> list[str]:
        """The running Ray steps' ids ('123.4'), for the hang dumps; [] when squeue does not answer."""
        return list(self.listed_steps().values())
