"""Data preparation: DAPO-Math-17K, AIME 2024 and AIME 2025 into the cleaned parquet files the recipe trains on.

`beam-slurm prepare-data` (beam_slurm.data.cli) resolves the sources (hub or local, beam_slurm.data.sources), cleans the
DAPO-format files with SkyRL's rule in a streamed pass (beam_slurm.data.cleaning), converts AIME 2025 into the DAPO
format (beam_slurm.data.aime) and records what it wrote (beam_slurm.data.manifest).
"""
