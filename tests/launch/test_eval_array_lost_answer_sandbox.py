"""An evaluation array whose sbatch answer is lost, on the Slurm sandbox: submitit runs a wrapper `sbatch` earlier
on PATH that runs the real one and then reports a socket time-out (the array exists: adopted, each task's pickle
moved where the task reads it), or reports it without running the real one (no array: submitted again, once).
The arrays are kept from starting by `--begin` and cancelled at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest
import submitit

from beam_slurm.launch import eval_array
from beam_slurm.launch.eval_array import TaskSpec

pytestmark = [pytest.mark.sandbox, pytest.mark.slurm_semantics]

TIMED_OUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"


@pytest.fixture
def array_setup(slurm_sandbox, monkeypatch):
    root = slurm_sandbox.new_dir("eval-lost")
    name = f"arrlost-{uuid.uuid4().hex[:6]}"
    params = {"name": name, "timeout_min": 5, "nodes": 1, "gpus_per_node": 0, "tasks_per_node": 1,
              "array_parallelism": 2, "max_num_timeout": 1, "partition": slurm_sandbox.partition("batch"),
              "comment": "team-eval", "additional_parameters": {"begin": "now+7200"}}
    tasks = [(TaskSpec(checkpoint=f"/nowhere/global_step_{step}", data_file="/nowhere/aime.parquet",
                       out_dir=str(root / "out" / str(step)), ks=(1,)),) for step in (5, 10)]
    yield root, name, params, tasks
    for job_id in arrays_named(slurm_sandbox, name):
        slurm_sandbox.cancel(job_id)


def arrays_named(slurm_sandbox, name: str) -> dict[str, str]:
    """Array id -> comment of every job whose token names `name` (raw squeue, all states)."""
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%A|%k"], capture_output=True, text=True,
                         env=slurm_sandbox.env(), timeout=60, check=True).stdout
    return {line.split("|")[0]: line.split("|", 1)[1] for line in out.splitlines()
            if f"beam-slurm:{name}:eval:" in line}


def wrap_sbatch(root, body: str, monkeypatch):
    real = shutil.which("sbatch")
    folder = root / "bin"
    folder.mkdir()
    (folder / "sbatch").write_text(f'#!/bin/bash\nREAL={real}\necho "$@" >> {folder}/calls\n{body}\n')
    (folder / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return folder / "calls"


def test_an_array_created_before_the_answer_was_lost_is_adopted(slurm_sandbox, array_setup, monkeypatch):
    root, name, params, tasks = array_setup
    calls = wrap_sbatch(root, f'"$REAL" "$@" > /dev/null\necho "{TIMED_OUT}" >&2\nexit 1', monkeypatch)
    folder = root / ".submitit" / "%j"
    ids = eval_array.submit_array(tasks, params, folder, owner=name)
    arrays = arrays_named(slurm_sandbox, name)
    assert len(arrays) == 1 and len(calls.read_text().splitlines()) == 1, arrays
    (array, comment), = arrays.items()
    assert ids == [f"{array}_0", f"{array}_1"]
    assert comment.startswith("team-eval beam-slurm:")  # the user's own comment kept in front of the token
    for job_id, specs in zip(ids, tasks, strict=True):
        pickle = submitit.SlurmJob(folder=folder, job_id=job_id).paths.submitted_pickle
        assert submitit.core.utils.DelayedSubmission.load(pickle).function.specs == specs  # where the task reads it
    state = subprocess.run(["squeue", "--noheader", f"--jobs={array}", "--format=%T %r"], capture_output=True,
                           text=True, env=slurm_sandbox.env(), timeout=60, check=True).stdout
    assert "Held" not in state and "PENDING" in state, state  # released: it waits for its --begin only


def test_an_array_lost_before_it_was_created_is_submitted_again_once(slurm_sandbox, array_setup, monkeypatch):
    root, name, params, tasks = array_setup
    once = root / "failed-once"
    calls = wrap_sbatch(root, f'if [ ! -e {once} ]; then touch {once}; echo "{TIMED_OUT}" >&2; exit 1; fi\n'
                              'exec "$REAL" "$@"', monkeypatch)
    ids = eval_array.submit_array(tasks, params, root / ".submitit" / "%j", owner=name)
    arrays = arrays_named(slurm_sandbox, name)
    assert len(arrays) == 1 and len(calls.read_text().splitlines()) == 2, arrays
    assert ids == [f"{next(iter(arrays))}_{i}" for i in range(2)]
