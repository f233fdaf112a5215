"""Ray across one Slurm allocation: one srun step, one task per node, rank 0 the head (`node`, then `head` or
`worker`, sharing `role`); each module says what it holds."""
