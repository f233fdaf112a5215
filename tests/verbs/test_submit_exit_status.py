"""`submit`'s exit status from what it did and did not queue (beam_slurm.verbs.submit.exit_status)."""

from __future__ import annotations

import pytest

from beam_slurm.verbs.submit import exit_status

REFUSED = "run r train: not queued: Slurm refused it: Invalid partition name specified"
RUNNING = "run r data: not queued again: job 7 is RUNNING (queued earlier); --queue-anyway queues another copy"
QUEUED = "run r train: queued as job 8"


@pytest.mark.parametrize(
    ("missing", "queued", "status"),
    [
        ([], [QUEUED], 0),  # everything queued
        ([RUNNING], [QUEUED], 0),  # the new training job depends on the data job found running: said, not a failure
        ([RUNNING], [], 1),  # a second `submit`: everything asked for runs already
        ([REFUSED], [QUEUED], 1),  # a stage asked for was not queued
        ([REFUSED, RUNNING], [], 1),
        ([], [], 0),  # nothing to do: every stage complete
    ],
)
def test_exit_status(missing, queued, status):
    assert exit_status(missing, queued) == status
