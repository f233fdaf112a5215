"""Stage entry: import the container image into shared storage (run by sbatch/pull_container.sh and the pipeline)."""

import sys
from pathlib import Path

# Importable from a plain checkout too (the batch script may run an interpreter without the package installed).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from beam_slurm.verbs.pull_container import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
