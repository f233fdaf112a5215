"""Stage entry of the training job (sbatch/train_*.sh): `beam-slurm train` inside the allocation."""

import sys

from beam_slurm.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
