"""`beam-slurm requeue RUN`: save at the next step, then put the running job back in the queue (launch.run_control)."""

from __future__ import annotations

import sys

from beam_slurm.launch import run_control


def build_parser():
    return run_control.build_parser("requeue")


def main(argv: list[str]) -> int:
    return run_control.main_for("requeue", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
