"""Stage entry of the data job (sbatch/prepare_data.sh, the pipeline): `beam-slurm prepare-data`."""

import sys

from beam_slurm.cli import main

if __name__ == "__main__":
    sys.exit(main(["prepare-data", *sys.argv[1:]]))
