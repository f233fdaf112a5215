"""The driver's side of a preemption whose only signal is a SIGTERM to the job's tasks.

Slurm signals every process of the Ray step: the node's task holds it (`NodeRole.hold_sigterm`), and so must the
driver, or Ray's handler exits before the batch shell asks for a save. One SIGTERM is held when the job spec's
sigterm_notice allows it and the attempt is not being stopped by us; any other goes to the previous handler.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from beam_slurm.config.job_spec import JobSpec
from beam_slurm.core.layout import attempt_dir
from beam_slurm.core.ray_records import stopping

_held = False


def hold_first_sigterm() -> None:
    """Call in the driver after ray.init (which installs its own SIGTERM handler); a no-op without sigterm_notice."""
    if not JobSpec.read(attempt_dir()).sigterm_notice:
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        global _held
        if not _held and (folder := attempt_dir()) is not None and not stopping(folder):
            _held = True
            print(
                f"[driver {time.strftime('%H:%M:%S')}] SIGTERM held: it may be a preemption's notice; the batch "
                "shell asks for a save or stops the step",
                file=sys.stderr,
                flush=True,
            )
            return
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
