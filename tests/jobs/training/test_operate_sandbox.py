"""Operating a running job on the Slurm sandbox: `beam-slurm attach`, `beam-slurm logs`, the environment manifest.

ONE rehearsal job (real batch script started with plain `sbatch`, real Ray on two nodes) serves every check, to keep
CI short: while it runs, `attach --node <worker> -- hostname`, `attach -- ray status`, and a Ray actor on each node that
reads the manifest's variables back (the attach step itself starts without them, so only the nodes' environment can
have put them there); then the worker's raylet is killed, which ends the job (cluster.max_requeues=0), and `logs` must
show every node's Ray logs; last, planted secret values must appear in none of the run's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import uuid

import pytest
from json_output_checks import assert_json_valid
from ray_processes import raylet_pids
from train_runs import REPO_ROOT, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

PLANTED = ("HF_TOKEN", "WANDB_API_KEY")

ACTOR_PER_NODE = r"""
import json, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(logging_level="ERROR", log_to_driver=False)

@ray.remote(num_cpus=0)
class Reader:
    def read(self):
        import hashlib, os, socket
        seen = {n: os.environ.get(n) for n in ("HF_HUB_OFFLINE", "WANDB_PROJECT", "BEAM_MANIFEST_MARK")}
        seen.update({n: hashlib.sha256(os.environ[n].encode()).hexdigest() if n in os.environ else None
                     for n in ("HF_TOKEN", "WANDB_API_KEY")})
        return socket.gethostname(), seen

readers = [Reader.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
           for n in ray.nodes() if n["Alive"]]
print(json.dumps(dict(ray.get([r.read.remote() for r in readers], timeout=180))))
"""


def beam(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "beam_slurm.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_attach_logs_and_one_environment_on_every_node(train_run):
    token, key = f"hf-{uuid.uuid4().hex}", f"wandb-{uuid.uuid4().hex}"
    run = train_run(steps=300, ckpt_interval=50, step_seconds=1.0,
                    extra_env={"HF_TOKEN": token, "HF_HUB_OFFLINE": "1", "WANDB_PROJECT": "beam-manifest"})
    key_file = run.work / "wandb_api_key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    run.submit("--time=00:10:00", overrides=(
        "cluster.log_copy_interval_s=5", "cluster.max_requeues=0", "cluster.max_in_job_attempts=0", f"+trainer.env_secret_files.WANDB_API_KEY={key_file}",
        "+trainer.extra_env.BEAM_MANIFEST_MARK=from-the-recipe"))
    # The user's shell later on: no manifest variable in it, so an actor can only see them through its node.
    user_env = {k: v for k, v in run.env().items() if k not in (*PLANTED, "HF_HUB_OFFLINE", "WANDB_PROJECT")}
    target = str(run.export_path)
    try:
        run.wait_for_steps(2, timeout=300)
        logs = run.export_path / "logs" / f"{run.job_id}-0"
        head = wait_for(lambda: (logs / "ray_head.json").is_file() and json.loads((logs / "ray_head.json").read_text()),
                        60, "the head's record")
        nodes = head["nodes"]  # whichever two sandbox nodes the job got (other tests share the sandbox)
        assert len(nodes) == 2 and head["host"] == nodes[0], head
        worker = nodes[1]
        wait_for(lambda: all((logs / "ray" / n / "COPY.json").is_file() for n in nodes), 60,
                 "the first periodic copy of both nodes' Ray logs")

        attached = beam(user_env, "attach", target, "--node", worker, "--", "hostname")
        assert attached.returncode == 0, attached.stderr
        assert attached.stdout.strip() == worker, attached.stdout
        assert "--overlap" in attached.stderr and f"--jobid={run.job_id}" in attached.stderr

        status = beam(user_env, "attach", run.job_id, "--", "ray", "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count(" node_") >= 2 and "GPU" in status.stdout, status.stdout

        actors = beam(user_env, "attach", target, "--", "python", "-c", ACTOR_PER_NODE, timeout=300)
        assert actors.returncode == 0, actors.stdout[-3000:] + actors.stderr[-3000:]
        seen = json.loads(actors.stdout.strip().splitlines()[-1])
        digest = lambda text: hashlib.sha256(text.encode()).hexdigest()  # noqa: E731
        assert sorted(seen) == sorted(nodes), seen
        for node, values in seen.items():
            assert values == {"HF_HUB_OFFLINE": "1", "WANDB_PROJECT": "beam-manifest",
                              "BEAM_MANIFEST_MARK": "from-the-recipe", "HF_TOKEN": digest(token),
                              "WANDB_API_KEY": digest(key)}, (node, values)
        for node in nodes:
            record = json.loads((logs / "env" / f"{node}.json").read_text())["exported"]
            assert record["HF_TOKEN"] == record["WANDB_API_KEY"] == "<set>" and record["HF_HUB_OFFLINE"] == "1"

        following = subprocess.Popen([sys.executable, "-m", "beam_slurm.cli", "logs", target, "--follow"],
                                     cwd=REPO_ROOT, env=user_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        pids = raylet_pids(run.job_id, attempt=0, node=worker)
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        assert run.finish(timeout=180) == "FAILED"
        # --follow printed what the job wrote after it started, and returned once the job ended.
        followed, _ = following.communicate(timeout=60)
        assert following.returncode == 0 and f"{worker}: this node's Ray (raylet) died" in followed, followed[-3000:]
    finally:
        run.sandbox.cancel(run.job_id)

    shown = beam(user_env, "logs", target)
    assert shown.returncode == 0, shown.stderr
    for node in nodes:
        assert f"== Ray logs of {node}: " in shown.stdout, shown.stdout[-4000:]
        files = [p.name for p in (logs / "ray" / node).rglob("*") if p.is_file()]
        assert "raylet.out" in files, (node, files)
    assert "gcs_server.out" in [p.name for p in (logs / "ray" / nodes[0]).rglob("*")]
    # The worker's bootstrap saw its raylet die and copied after it; its last raylet lines are in the copy.
    assert json.loads((logs / "ray" / worker / "COPY.json").read_text())["reason"] == "failure"
    assert "copy after a failure" in shown.stdout
    one = beam(user_env, "logs", run.job_id, "--node", worker, "--lines", "5")
    assert one.returncode == 0 and f"== {worker}: " in one.stdout and "raylet.out" in one.stdout, one.stdout[-3000:]
    assert "batch log of job" in shown.stdout and "train_job.log" in shown.stdout
    listed = beam(user_env, "logs", target, "--json")
    assert listed.returncode == 0, listed.stderr
    listing = json.loads(listed.stdout)
    assert_json_valid("logs", listing)
    assert listing["job_id"] == run.job_id and listing["attempt"] == "0" and listing["attempts"] == ["0"], listing
    assert {f["path"].rsplit("/", 1)[-1]: f["bytes"] for f in listing["files"]}["train_job.log"] > 0, listing
    ray = {entry["node"]: entry for entry in listing["ray_logs"]}
    assert sorted(ray) == sorted(nodes) and ray[worker]["copy"]["reason"] == "failure", listing
    assert all(isinstance(f["bytes"], int) for entry in ray.values() for f in entry["files"]), listing
    assert "raylet.out" in {f["path"].rsplit("/", 1)[-1] for f in ray[worker]["files"]}, listing

    refused = beam(user_env, "attach", target, "--", "hostname")
    assert refused.returncode == 2 and "attach needs a running job" in refused.stderr, refused.stderr

    leaked = [str(p) for p in run.work.rglob("*") if p.is_file() and p != key_file
              and any(v.encode() in p.read_bytes() for v in (token, key))]
    assert not leaked, leaked
