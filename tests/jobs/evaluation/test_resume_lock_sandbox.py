"""Two evaluation tasks on two nodes at once resuming ONE sample store (as array tasks on shared storage do): each
reads what is saved, generates what is missing and publishes it, under the store's lock. Under the product's lock
(resumable.locked, a SharedFileLock) no response is lost or duplicated; under a lock seen only on its own node (flock
on a node-private copy of the lock path, as flock is on Lustre mounted with `localflock` or BeeGFS without global
locks) the two read the same state and draw the same sample indices."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox
REPO_ROOT = Path(__file__).resolve().parents[3]
APPENDS = 300  # per node

WRITER = """
import contextlib, fcntl, pathlib, socket, sys, time
from beam_slurm.jobs.evaluation import resumable
from beam_slurm.jobs.evaluation.problems import Problem

lock_kind, folder, ready, appends = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]), int(sys.argv[4])
host = socket.gethostname()
store = resumable.SampleStore(folder)
problem = Problem(data_source="aime", problem_id="p0", messages=[{"role": "user", "content": "1+1?"}], ground_truth="2")


class OneResponseEngineDouble:
    # A test double for the generation engine (no model): one row per missing sample, as the real engines return.
    def generate(self, requests):
        return [{"problem_id": p.problem_id, "sample": first + i, "response": "2", "host": host}
                for p, missing, first in requests for i in range(missing)]


@contextlib.contextmanager
def node_local_lock(path):
    # What flock amounts to across nodes on Lustre `localflock`: a lock only this node sees (its private /tmp).
    with open(pathlib.Path("/tmp") / path.name, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


lock = resumable.locked if lock_kind == "shared" else node_local_lock
(ready / host).touch()
while len(list(ready.iterdir())) < 2:  # both tasks start together
    time.sleep(0.001)
started = time.monotonic()
for _ in range(appends):
    with lock(folder / resumable.STORE_LOCK):  # what run_tasks holds around generate_missing
        k = store.counts().get(problem.problem_id, 0) + 1  # one more response than saved: a resume adding one
        resumable.generate_missing(store, [problem], k, OneResponseEngineDouble, 1, resumable.Progress())
print("WROTE", lock_kind, host, f"{time.monotonic() - started:.1f}", flush=True)
"""


def saved(folder: Path) -> list[tuple[str, int]]:
    """(host, sample) of every saved response, read as the next resume reads them."""
    from beam_slurm.jobs.evaluation.resumable import SampleStore

    return [(row["host"], row["sample"]) for row in SampleStore(folder).responses()]


def test_two_nodes_resuming_one_store_lose_and_duplicate_nothing_under_the_shared_lock(slurm_sandbox):
    work = slurm_sandbox.new_dir("resume-lock")
    (work / "writer.py").write_text(WRITER)
    for kind in ("shared", "node-local"):
        (work / kind / "ready").mkdir(parents=True)
    steps = "\n".join(
        f"srun {sys.executable} {work / 'writer.py'} {kind} {work / kind / 'store'} {work / kind / 'ready'} {APPENDS}"
        for kind in ("shared", "node-local")
    )
    script = f"""#!/bin/bash
#SBATCH --job-name=resume-lock --nodes=2 --ntasks=2 --ntasks-per-node=1 --mem=300 --time=4
#SBATCH --partition={slurm_sandbox.partition("batch")} --output={work}/slurm-%j.out
export PYTHONPATH={REPO_ROOT}
{steps}
"""
    job_id = slurm_sandbox.sbatch(script)
    state = slurm_sandbox.wait(job_id, timeout=200)
    output = (work / f"slurm-{job_id}.out").read_text()
    assert state == "COMPLETED", output
    wrote = [line.split() for line in output.splitlines() if line.startswith("WROTE")]
    for kind in ("shared", "node-local"):
        assert len({host for _, k, host, _ in wrote if k == kind}) == 2, f"{kind}: not two nodes\n{output}"

    rows = saved(work / "shared" / "store")
    per_host = collections.Counter(host for host, _ in rows)
    assert sorted(sample for _, sample in rows) == list(range(2 * APPENDS)), (
        f"shared lock: {len(rows)} responses, {len({s for _, s in rows})} distinct sample indices of {2 * APPENDS}"
    )
    assert sorted(per_host.values()) == [APPENDS, APPENDS], per_host

    # The same run under a node-local lock: the two tasks resume from the same state and draw the same samples.
    local = saved(work / "node-local" / "store")
    distinct = len({sample for _, sample in local})
    print(json.dumps({"node_local_responses": len(local), "distinct_samples": distinct, "expected": 2 * APPENDS}))
    assert distinct < 2 * APPENDS, "the node-local run lost nothing: this harness would not see a missing lock"
