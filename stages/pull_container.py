"""Stage entry of the container job (sbatch/pull_container.sh, the pipeline): `beam-slurm pull-container`."""

import sys

from beam_slurm.cli import main

if __name__ == "__main__":
    sys.exit(main(["pull-container", *sys.argv[1:]]))
