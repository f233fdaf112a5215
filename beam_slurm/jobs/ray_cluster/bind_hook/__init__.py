"""A folder put first on PYTHONPATH for the job's Ray processes only: its `sitecustomize` binds Ray's metrics servers
to the node's address (see there)."""
