"""Layer 2: every call to the Slurm commands (sbatch, srun, squeue, sacct, scontrol, sacctmgr) and Slurm's value
grammars. Knows nothing of the recipe: below config/, so the recipe's validation can read Slurm's grammars."""
