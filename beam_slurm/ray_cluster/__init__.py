"""Ray across one Slurm allocation: one srun step, one task per node, rank 0 the head.

settings.RaySettings   what can be configured (interface, ports, auth, temp dir, deadlines, extra env)
ports                  per-job port block from SLURM_JOB_ID, bind-checked, every port overridable
auth                   per-job private folder on shared storage, token file (0600) for RAY_AUTH_MODE=token
network                the node's IPv4 address (interface, hostname, route)
rendezvous             shared files through which the nodes find the head
local_ray              `ray start` in its own process group and a stop scoped to this job
gpus                   Slurm's GPU allocation against what Ray hands out (SkyRL issue 1577)
node                   `python -m beam_slurm.ray_cluster.node -- DRIVER...`: bring-up, driver, supervision, teardown
"""
