"""SharedFileLock.try_acquire: the non-blocking form (refuse while a live holder beats, take a dead one's over)."""

from __future__ import annotations

import json
import logging
import socket
import time

from beam_slurm.core.shared_lock import SharedFileLock


def test_try_acquire_refuses_a_live_holder_within_a_heartbeat_and_takes_over_a_dead_one(tmp_path, caplog):
    path = tmp_path / "x.lock"
    holder = SharedFileLock(path, stale_after=1.0, heartbeat=0.2)
    assert holder.try_acquire(), "a free lock is taken at once"
    started = time.monotonic()
    assert not SharedFileLock(path, stale_after=1.0, poll_interval=0.05).try_acquire()
    assert time.monotonic() - started < 0.6, "refused once the holder's heartbeat showed"
    holder.release()

    # Left by a holder on another node that died: taken over after stale_after, logged by the lock's own logger.
    path.write_text(json.dumps({"host": "not-" + socket.gethostname(), "pid": 1234567, "pid_start": "1",
                                "token": "f" * 32, "acquired_at": 0}))
    waiter = SharedFileLock(path, stale_after=1.0, poll_interval=0.05)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="beam_slurm.core.shared_lock"):
        assert waiter.try_acquire()
    assert time.monotonic() - started >= 1.0
    assert any("taking over, no heartbeat from pid 1234567" in r.getMessage() for r in caplog.records)
    waiter.release()
    assert not path.exists()
