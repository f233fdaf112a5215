"""Configuration errors that name the setting, the value and the fix."""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigProblem:
    """One bad setting."""

    key: str
    """Dotted key, e.g. `megatron.tensor_parallel`."""
    value: object
    """The value that was given (or derived)."""
    fix: str
    """What to do about it, in one sentence."""

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}: {self.fix}"


class ConfigError(Exception):
    """Raised with every problem found, so the user fixes them all in one round."""

    exit_code = 2

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def report(self, stream=None) -> None:
        stream = stream or sys.stderr
        n = len(self.problems)
        print(f"beam-slurm: invalid configuration ({n} problem{'s' if n != 1 else ''}); nothing was submitted", file=stream)
        for p in self.problems:
            print(f"  - {p}", file=stream)
