"""Test double of the trainer (the real one needs GPUs): a Ray driver that runs a step loop, saves checkpoints in
SkyRL's layout (global_step_N/, latest_ckpt_global_step.txt last) and honours the save-on-notice protocol. Used only
by tests/ray_cluster; the product's stand-in for SkyRL is the rehearsal trainer.

Env: CKPT_PATH, RESUME_MODE, RAY_ADDRESS (set by the Ray head). Appends one line per step to
<CKPT_PATH>/steps.log: "<step> <attempt> <resume_mode>".
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import ray

from beam_slurm.core import notice


def unauthenticated_client_refused(address: str) -> str:
    """Connect once without the token; returns what happened ('refused: ...' or 'ACCEPTED')."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    code = f"import ray; ray.init(address={address!r}); print('CONNECTED', ray.cluster_resources())"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        return "refused: timed out"
    if done.returncode == 0 and "CONNECTED" in done.stdout:
        return "ACCEPTED"
    tail = (done.stderr.strip().splitlines() or ["?"])[-1]
    return f"refused: {tail[:200]}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("max_steps", type=int)
    parser.add_argument("step_seconds", type=float)
    parser.add_argument("--expect-gpus", type=int)
    parser.add_argument("--expect-nodes", type=int)
    parser.add_argument("--check-unauthenticated", action="store_true")
    parser.add_argument("--copy-token", help="copy the token file here (0600) so the test can grep logs for it")
    parser.add_argument("--rendezvous", nargs=2, metavar=("DIR", "COUNT"),
                        help="write DIR/<jobid> and wait until COUNT such files exist (jobs running side by side)")
    args = parser.parse_args()
    ray.init()
    resources = ray.cluster_resources()
    alive = [n for n in ray.nodes() if n["Alive"]]
    print(f"DRIVER cluster GPUs={resources.get('GPU', 0):.0f} nodes={len(alive)} address={os.environ['RAY_ADDRESS']} "
          f"auth={os.environ.get('RAY_AUTH_MODE', 'off')}", flush=True)
    if args.expect_gpus is not None and (resources.get("GPU", 0) != args.expect_gpus or len(alive) != args.expect_nodes):
        print(f"DRIVER expected {args.expect_gpus} GPUs on {args.expect_nodes} nodes", flush=True)
        return 1
    if args.check_unauthenticated:
        print(f"DRIVER unauthenticated client: {unauthenticated_client_refused(os.environ['RAY_ADDRESS'])}", flush=True)
    if args.copy_token:
        fd = os.open(args.copy_token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(Path(os.environ["RAY_AUTH_TOKEN_PATH"]).read_text())
    if args.rendezvous:
        folder, count = Path(args.rendezvous[0]), int(args.rendezvous[1])
        (folder / os.environ["SLURM_JOB_ID"]).write_text(os.environ["RAY_ADDRESS"])
        deadline = time.time() + 240
        while len(list(folder.iterdir())) < count:
            if time.time() > deadline:
                print("DRIVER the other job never ran alongside", flush=True)
                return 1
            time.sleep(0.5)
        print("DRIVER ran side by side with the other job", flush=True)
    ckpt = Path(os.environ["CKPT_PATH"])
    ckpt.mkdir(parents=True, exist_ok=True)
    resume = os.environ.get("RESUME_MODE", "none")
    start = (notice.read_marker(ckpt) or 0) + 1 if resume == "latest" else 1
    attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
    for step in range(start, args.max_steps + 1):
        time.sleep(args.step_seconds)
        with open(ckpt / "steps.log", "a") as log:
            log.write(f"{step} {attempt} {resume}\n")
        if notice.pending_request(ckpt) is not None or step == args.max_steps:
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
