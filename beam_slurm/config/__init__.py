"""Layer 3: the recipe's typed configuration: the schema and its sections, loading conf/ with Hydra, validation,
the verbs' argument convention, and what the recipe renders to (the SkyRL command, the container runtime's command
lines, the job spec, the environment manifest, the Ray port blocks)."""
