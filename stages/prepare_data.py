"""Stage entry: build the cleaned DAPO-Math-17K / AIME parquet files (what sbatch/prepare_data.sh and submitit run).

    python stages/prepare_data.py data.out_dir=DIR [data.<key>=<value> ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Runnable from any directory, also without the package installed (the checkout is the parent of stages/).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from beam_slurm.verbs.prepare_data import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
