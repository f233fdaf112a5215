"""`beam-slurm stop RUN`: save at the next step, then end the running job, resumable (launch.run_control)."""

from __future__ import annotations

import sys

from beam_slurm.launch import run_control


def build_parser():
    return run_control.build_parser("stop")


def main(argv: list[str]) -> int:
    return run_control.main_for("stop", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
