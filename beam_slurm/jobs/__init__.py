"""Layer 5: what runs inside allocations: the training attempt (training/), the Ray bootstrap on every node
(ray_cluster/), the evaluation task (evaluation/), data preparation (data/). Free of the submit-side libraries."""
