"""Evaluation stage entry: what sbatch/eval_aime.sh (and chained evaluation jobs) run.

Arguments are those of `beam-slurm evaluate --here` (added when missing). In a one-node allocation, or outside Slurm, it runs the evaluation
directly. In a multi-node allocation (Beam: TP8 x PP2 over two nodes) it first checks the inputs (bad input exits
2 before any node is touched), then starts the job's Ray cluster with one srun over all nodes
(beam_slurm.jobs.ray_cluster.node) and runs this same entry as the driver on the head node, where RAY_ADDRESS is set
and vLLM's Ray executor places its workers on every node.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from beam_slurm.verbs.evaluate import main as evaluate  # noqa: E402


def main(argv: list[str]) -> int:
    if "--here" not in argv:
        argv = ["--here", *argv]  # this job is the evaluation: run it in this allocation, submit nothing
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1)
    if nodes <= 1 or os.environ.get("RAY_ADDRESS"):
        return evaluate(argv)
    status = evaluate([*argv, "--check"])
    if status != 0:
        return status
    from beam_slurm.slurm.scheduler import allocation_from_env, srun_per_node

    allocation = allocation_from_env()
    command = srun_per_node(
        nodes,
        [sys.executable, "-m", "beam_slurm.jobs.ray_cluster.node", "--", sys.executable, str(Path(__file__).resolve()),
         *argv],
        cpus_per_task=allocation.cpus_on_node,
        gpus_per_node=allocation.gpus_on_node,
        job_name="eval-ray",
    )
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
