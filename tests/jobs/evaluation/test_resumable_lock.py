"""The evaluation store's lock (resumable.locked, a SharedFileLock): a killed holder's lock is taken over after its
lifetime with a line in the module's log; a live holder is waited for, never taken over."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from beam_slurm.jobs.evaluation import resumable

REPO = Path(__file__).resolve().parents[3]
LOGGER = "beam_slurm.jobs.evaluation.resumable"


def write_killed_holders_lock(lock_file: Path) -> None:
    """What a holder on another node leaves when it is killed: its record, never touched again."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock_file.write_text(json.dumps({"host": "other-node", "pid": 1234567, "pid_start": "1", "token": "f" * 32,
                                     "acquired_at": 0}))


def test_a_killed_holders_lock_is_taken_over_after_its_lifetime_with_a_log_line(tmp_path, caplog):
    lock_file = tmp_path / "samples" / "aime-abc" / resumable.STORE_LOCK
    write_killed_holders_lock(lock_file)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger=LOGGER), resumable.locked(lock_file, stale_after=1.0) as lock:
        waited = time.monotonic() - started
        assert lock.still_held()
    assert 1.0 <= waited < 5, f"taken over after {waited:.1f} s, its lifetime is 1 s"
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert f"lock {resumable.STORE_LOCK}: taking over, no heartbeat from pid 1234567 on other-node for 1 s" in lines
    assert not lock_file.exists(), "released"


HOLDER = """
import sys, time
from pathlib import Path
from beam_slurm.jobs.evaluation import resumable
with resumable.locked(Path(sys.argv[1]), stale_after=1.0):
    print("held", flush=True)
    time.sleep(3)  # three lifetimes: only the heartbeat keeps it held
    print("releasing", flush=True)
"""


def test_a_live_holder_is_waited_for_past_the_lifetime_not_taken_over(tmp_path, caplog):
    lock_file = tmp_path / resumable.VIEW_LOCK
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_file)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline() == "held\n"
        started = time.monotonic()
        with caplog.at_level(logging.INFO, logger=LOGGER), resumable.locked(lock_file, stale_after=1.0):
            waited = time.monotonic() - started
            assert holder.stdout.readline() == "releasing\n", "got the lock while its holder still held it"
    finally:
        holder.kill()
        holder.wait()
    assert waited > 2, f"waited {waited:.1f} s for a 3 s holder"
    assert not any("taking over" in r.getMessage() for r in caplog.records)
