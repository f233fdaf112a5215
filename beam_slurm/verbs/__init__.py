"""Layer 7: one module per `beam-slurm` verb, named after it: parse, call the layers below, print."""
