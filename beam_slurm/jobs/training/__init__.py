"""The training job: the attempt in the batch shell (preflight, the Ray step, supervision, restarts) and the
drivers (our SkyRL entrypoint, the rehearsal trainer)."""
