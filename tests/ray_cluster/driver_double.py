"""Test double of the trainer (the real one needs GPUs): a Ray driver that runs a step loop, saves checkpoints in
SkyRL's layout and honours the save-on-notice protocol. Used only by tests/ray_cluster.

argv: MAX_STEPS STEP_SECONDS [--expect-gpus N --expect-nodes M]. Env: CKPT_PATH, RESUME_MODE.
Appends one line per step to <CKPT_PATH>/steps.log: "<step> <attempt> <resume_mode>".
"""
import os
import sys
import time
from pathlib import Path

import ray

from beam_slurm.skyrl import notice


def main() -> int:
    max_steps, step_s = int(sys.argv[1]), float(sys.argv[2])
    extra = sys.argv[3:]
    ray.init()
    resources = ray.cluster_resources()
    alive = [n for n in ray.nodes() if n["Alive"]]
    print(f"DRIVER cluster GPUs={resources.get('GPU', 0):.0f} nodes={len(alive)}", flush=True)
    if "--expect-gpus" in extra:
        want_gpus = int(extra[extra.index("--expect-gpus") + 1])
        want_nodes = int(extra[extra.index("--expect-nodes") + 1])
        if resources.get("GPU", 0) != want_gpus or len(alive) != want_nodes:
            print(f"DRIVER expected {want_gpus} GPUs on {want_nodes} nodes", flush=True)
            return 1
    ckpt = Path(os.environ["CKPT_PATH"])
    ckpt.mkdir(parents=True, exist_ok=True)
    resume = os.environ.get("RESUME_MODE", "none")
    start = (notice.read_marker(ckpt) or 0) + 1 if resume == "latest" else 1
    attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
    for step in range(start, max_steps + 1):
        time.sleep(step_s)
        # A remote call per step, so a dead node surfaces in the driver too.
        ray.get(ray.remote(lambda: 1).options(num_cpus=0).remote())
        with open(ckpt / "steps.log", "a") as log:
            log.write(f"{step} {attempt} {resume}\n")
        if notice.pending_request(ckpt) is not None or step == max_steps:
            (ckpt / f"global_step_{step}").mkdir(exist_ok=True)
            (ckpt / notice.MARKER_FILE).write_text(str(step))
            if notice.pending_request(ckpt) is not None:
                notice.acknowledge(ckpt, step)
                print(f"DRIVER saved step {step} on notice", flush=True)
                return 0
    print("DRIVER finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
