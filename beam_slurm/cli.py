"""The `beam-slurm` command: one verb, then that verb's arguments.

Each verb lives in the module that owns it and is imported only when used, so
`beam-slurm plan` never pays for Ray, torch or vLLM imports.
"""

from __future__ import annotations

import importlib
import sys

# verb -> (module, function, one-line help). The function takes argv (list[str]) and returns an exit code.
VERBS: dict[str, tuple[str, str, str]] = {
    "plan": ("beam_slurm.plan", "main", "print the resource plan and the SkyRL command; validate the recipe"),
    "prepare-data": ("beam_slurm.data.cli", "main", "build the cleaned DAPO-Math-17K / AIME parquet files"),
    "train": ("beam_slurm.slurm.train_cli", "main", "run inside a Slurm allocation: Ray across nodes, then SkyRL"),
    "evaluate": ("beam_slurm.evaluation.cli", "main", "evaluate a checkpoint on AIME with vLLM"),
    "grade": ("beam_slurm.evaluation.grade_cli", "main", "grade pre-generated responses (JSONL) and write metrics"),
    "report": ("beam_slurm.evaluation.report", "main", "table and plots of a run's evaluations"),
    "submit": ("beam_slurm.pipeline.submit", "main", "submit the stage chain (or a -m sweep) as Slurm jobs"),
    "status": ("beam_slurm.pipeline.status", "main", "status of a run or sweep"),
    "sync": ("beam_slurm.pipeline.tracking", "main", "upload a run's offline W&B folders into its one W&B run"),
    "requeue": ("beam_slurm.slurm.operator", "requeue_main", "save at the next step, then requeue a running job"),
    "stop": ("beam_slurm.slurm.operator", "stop_main", "save at the next step, then stop a running job (resumable)"),
    "cancel": ("beam_slurm.slurm.operator", "cancel_main", "cancel a run's or a sweep's queued and running jobs"),
    "attach": ("beam_slurm.slurm.attach", "main", "a shell (or -- CMD) on a node of a running job, with its Ray address"),
    "logs": ("beam_slurm.slurm.logs", "main", "a job's batch log, attempt logs and every node's Ray logs"),
    "pull-container": ("beam_slurm.containers.pull", "main", "import the recipe's image once to shared storage"),
}


def _usage() -> str:
    lines = ["usage: beam-slurm <verb> [args...]", "", "verbs:"]
    lines += [f"  {verb:<15} {help_}" for verb, (_, _, help_) in VERBS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"beam-slurm: unknown verb {verb!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name, _ = VERBS[verb]
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
