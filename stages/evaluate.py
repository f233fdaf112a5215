"""Stage entry of the evaluation job (sbatch/eval_aime.sh, chained evaluations): one checkpoint evaluated in this
allocation, across its nodes when it has several (beam_slurm.verbs.evaluate.stage_main)."""

import sys

from beam_slurm.verbs.evaluate import stage_main

if __name__ == "__main__":
    sys.exit(stage_main(sys.argv[1:], __file__))
