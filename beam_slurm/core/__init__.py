"""Layer 1, the bottom: what every other folder may use and that uses nothing of beam_slurm above it: the on-disk
layout, the run record and its store, the user-error and configuration-problem types, atomic files, the
shared-storage lock, and the file protocols between the batch shell, the nodes and the trainer (notice, progress,
the Ray step's records, training metrics)."""
