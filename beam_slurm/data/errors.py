"""The one error type of the data stage: bad input the user can fix (exit status 2)."""

from __future__ import annotations

from beam_slurm.core.errors import UserError


class BadDataInput(UserError):
    """A setting, a source file or an output directory the stage cannot use; the message names it and the fix."""
