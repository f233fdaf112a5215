"""The bottom layer: what every other folder may use and that uses nothing of beam_slurm above it (the run record
and its store, the on-disk layout, the user-error base, atomic files and the shared-storage lock)."""
