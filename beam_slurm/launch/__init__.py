"""Layer 6: from a recipe to Slurm jobs, and back to what a run is: stage requests, sweeps, evaluation arrays and
the chain, resolving runs, a run's submissions and results."""
