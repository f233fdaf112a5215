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


def test_a_job_id_no_index_lists_is_found_where_slurm_says_it_wrote(slurm_sandbox, tmp_path, monkeypatch):
    from beam_slurm.core.run_record import StageEntry, Submission
    from beam_slurm.launch.runs import RunNotFound, resolve_run

    export = slurm_sandbox.new_dir("resolve") / "export"
    logs = export / "logs"
    logs.mkdir(parents=True)
    job_id = slurm_sandbox.sbatch(f"#!/bin/bash\n#SBATCH --mem=100 --time=1 --output={logs}/data-%j.out\ntrue\n")
    store = RunStore(export)
    store.update(lambda run: run.submissions.append(Submission(stages=[StageEntry(stage="data", job_id=job_id)])))
    assert slurm_sandbox.wait(job_id, timeout=120) == "COMPLETED"
    # Another login node: no job index in this HOME, and the run is not under the exports root.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("SLURM_CONF", str(slurm_sandbox.slurm_conf))
    assert resolve_run(job_id, str(tmp_path / "no-exports")) == export
    with pytest.raises(RunNotFound, match="where Slurm says the job wrote"):
        resolve_run("999999", str(tmp_path / "no-exports"))
