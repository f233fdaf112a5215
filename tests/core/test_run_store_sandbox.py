"""Two writers of one run record on two nodes at once, with flock doing nothing (as on Lustre mounted with
localflock, or BeeGFS without global locks: the sandbox's nodes share one kernel, where flock would work)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from beam_slurm.core.run_store import RunStore

pytestmark = pytest.mark.sandbox
REPO_ROOT = Path(__file__).resolve().parents[2]
UPDATES = 30

WRITER = """
import fcntl, pathlib, socket, sys, time
fcntl.flock = fcntl.lockf = lambda *args, **kwargs: None  # a file system that ignores flock
from beam_slurm.core.run_record import BadNode
from beam_slurm.core.run_store import RunStore
store, host, ready = RunStore(sys.argv[1]), socket.gethostname(), pathlib.Path(sys.argv[2])
(ready / host).touch()
while len(list(ready.iterdir())) < 2:  # both writers start together
    time.sleep(0.001)
for i in range(int(sys.argv[3])):
    store.update(lambda run: run.bad_nodes.append(BadNode(node=host, reason=str(i))))
print("WROTE", host, flush=True)
"""


def test_writers_on_two_nodes_at_once_lose_no_update_without_flock(slurm_sandbox):
    work = slurm_sandbox.new_dir("run-store")
    (work / "writer.py").write_text(WRITER)
    export, ready = work / "export", work / "ready"
    ready.mkdir()
    script = f"""#!/bin/bash
#SBATCH --job-name=run-store --nodes=2 --ntasks-per-node=1 --mem=200 --time=3
#SBATCH --output={work}/slurm-%j.out
export PYTHONPATH={REPO_ROOT}
srun {sys.executable} {work / 'writer.py'} {export} {ready} {UPDATES}
"""
    job_id = slurm_sandbox.sbatch(script)
    state = slurm_sandbox.wait(job_id, timeout=180)
    output = (work / f"slurm-{job_id}.out").read_text()
    assert state == "COMPLETED", output
    hosts = sorted(line.split()[1] for line in output.splitlines() if line.startswith("WROTE"))
    assert len(set(hosts)) == 2, output
    written = sorted((b.node, b.reason) for b in RunStore(export).read().bad_nodes)
    assert written == sorted((host, str(i)) for host in hosts for i in range(UPDATES)), \
        f"{len(written)} of {2 * UPDATES} updates kept"
