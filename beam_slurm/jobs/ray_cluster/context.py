"""What one Ray node of the job knows about itself: Slurm's environment and the attempt's job spec.

The batch shell starts one step per node (`jobs.training.ray_steps`), so a node's place in the cluster is not its
task rank but what the shell set: RANK_ENV, NODES_ENV (the cluster's hosts in rank order) and CLUSTER_ENV (which
bring-up of the job it belongs to: its rendezvous folder). Without them (one step over every node) Slurm's task rank
and step are used."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from beam_slurm.config.job_spec import JobSpec
from beam_slurm.core.layout import attempt_dir, environ_attempt_label
from beam_slurm.core.ray_records import NodeFailure
from beam_slurm.slurm.scheduler import SlurmCommandError, expand_hostnames

RANK_ENV = "BEAM_RAY_RANK"
NODES_ENV = "BEAM_RAY_NODES"
CLUSTER_ENV = "BEAM_RAY_CLUSTER"


@dataclass
class NodeContext:
    """One task of the Ray step (one per node): its job, attempt, rank and the step's nodes."""

    job_id: str
    attempt: int  # SLURM_RESTART_COUNT
    attempt_label: str  # the attempt as status names it: `0`, or `0.1` for an in-job restart
    step: str  # CLUSTER_ENV, else SLURM_STEP_ID: separates two bring-ups of one attempt
    rank: int  # SLURM_PROCID; 0 is the head
    num_nodes: int
    host: str
    step_hosts: list[str]  # in rank order (one task per node, block distribution)
    attempt_dir: Path | None  # BEAM_ATTEMPT_DIR
    cpus: int  # on this node for this job
    spec: JobSpec = field(default_factory=JobSpec)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> NodeContext:
        env = dict(os.environ if environ is None else environ)
        missing = [name for name in ("SLURM_JOB_ID", "SLURM_PROCID") if name not in env]
        if missing:
            raise NodeFailure("setup", f"{', '.join(missing)} not set: run this module with srun inside the job")
        num_nodes = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or 1)
        num_tasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or num_nodes)
        cluster_hosts = [h for h in env.get(NODES_ENV, "").split(",") if h]
        if cluster_hosts:  # one step per node: the shell says where this one stands
            num_nodes = num_tasks = len(cluster_hosts)
        if num_tasks != num_nodes:
            raise NodeFailure(
                "setup",
                f"the Ray step has {num_tasks} tasks on {num_nodes} nodes; run it with "
                "--ntasks-per-node=1 (one Ray node per host)",
            )
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        try:
            hosts = cluster_hosts or (expand_hostnames(nodelist) if nodelist else [])
        except SlurmCommandError:
            hosts = []
        folder = attempt_dir(env)
        try:
            spec = JobSpec.read(folder)
        except (OSError, ValueError, TypeError) as exc:
            raise NodeFailure("setup", f"the attempt's job spec in {folder} cannot be read: {exc}") from None
        return cls(
            job_id=env["SLURM_JOB_ID"],
            attempt=int(env.get("SLURM_RESTART_COUNT") or 0),
            attempt_label=environ_attempt_label(env),
            step=env.get(CLUSTER_ENV) or env.get("SLURM_STEP_ID", "0"),
            rank=int(env.get(RANK_ENV) or env["SLURM_PROCID"]),
            num_nodes=num_nodes,
            host=env.get("SLURMD_NODENAME") or socket.gethostname(),
            step_hosts=hosts,
            attempt_dir=folder,
            cpus=int(env.get("SLURM_CPUS_ON_NODE") or os.cpu_count() or 1),
            spec=spec,
        )

    def host_of_rank(self, rank: int) -> str:
        return self.step_hosts[rank] if rank < len(self.step_hosts) else f"rank {rank}"
