"""Ray across one Slurm allocation: one srun step, one task per node, rank 0 the head.

settings.RaySettings   what can be configured (interface, ports, auth, temp dir, deadlines, extra env)
ports                  per-job port block from SLURM_JOB_ID, bind-checked, every port overridable
auth                   per-job private folder on shared storage, token file (0600) for RAY_AUTH_MODE=token
network                the node's IPv4 address (interface, hostname, route); TCP reachability
rendezvous             shared files through which the nodes find the head
local_ray              `ray start` in its own process group and a stop scoped to this job
gpus                   Slurm's GPU allocation against what Ray hands out (SkyRL issue 1577)
context                what one task knows from Slurm's environment (job, attempt, rank, hosts)
records                exit statuses and files the step leaves for the batch shell (failure, driver exit, times)
role                   what head and workers share: stop flag, logging, failure record, `ray start` on the port block
checks                 GPU count per node and GPU visibility across the cluster, before the driver starts
supervision            liveness watches while the driver runs (head -> workers, worker -> head)
head / worker          each side of the bootstrap
node                   `python -m beam_slurm.ray_cluster.node -- DRIVER...`: signals, rank -> head or worker, teardown
"""
