"""beam-slurm: the Beam GRPO/DAPO recipe on Slurm clusters."""

from pathlib import Path

__version__ = "0.1.0"

#: Repository root when running from a checkout (conf/, sbatch/, stages/ live here).
REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
