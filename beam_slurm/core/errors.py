"""The base of every "bad input" error: what is wrong, the setting (and its environment variable) and the fix. A verb
prints it without a traceback and exits 2; anything else that escapes stays a traceback."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO


class UserError(Exception):
    """Bad input from the user (a setting, an argument, a file they named); exit status 2, nothing submitted."""

    exit_code = 2

    def __init__(self, message: str = "", *, setting: str | None = None, env: str | None = None, fix: str = ""):
        self.message = message
        self.setting = setting
        """The dotted key or flag the input came through, when there is one."""
        self.env = env
        """The environment variable the value came from, when it did."""
        self.fix = fix
        """What to do about it, in one sentence."""
        super().__init__(self.describe())

    def describe(self) -> str:
        where = f"{self.setting} (from {self.env})" if self.setting and self.env else self.setting or self.env
        return f"{where + ': ' if where else ''}{self.message}" + (f"; fix: {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class ConfigProblem:
    """One bad setting: `key=value: fix`, or `key: problem; fix: fix` when the value alone does not say what is
    wrong."""

    key: str  # Dotted key, e.g. `megatron.tensor_parallel` or `container.mounts[1]`
    value: object = None
    """The value that was given (or derived); as the user typed it when it never became a typed value."""
    fix: str = ""  # What to do about it, in one sentence
    problem: str | None = None  # What is wrong, quoting the offending value, when that needs more than the value itself
    env: str | None = None
    """The environment variable the value came from (e.g. CKPT_INTERVAL for checkpoint.interval), if it did."""

    @property
    def label(self) -> str:
        """The key, with the environment variable the value came from: `checkpoint.interval (from CKPT_INTERVAL)`."""
        return f"{self.key} (from {self.env})" if self.env else self.key

    def from_env(self, sources: Mapping[str, str]) -> ConfigProblem:
        """This problem, naming the environment variable its key was read from (`sources`: key -> variable)."""
        env = self.env or sources.get(self.key)
        return dataclasses.replace(self, env=env) if env != self.env else self

    def __str__(self) -> str:
        if self.problem is not None:
            return f"{self.label}: {self.problem}; fix: {self.fix}"
        return f"{self.label}={self.value!r}: {self.fix}"


class ConfigError(UserError):
    """Raised with every problem found, so the user fixes them all in one round."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def report(
        self, stream: TextIO | None = None, *, prefix: str = "beam-slurm: ", what: str = "; nothing was submitted"
    ) -> None:
        """Print every problem, after `prefix` (a verb's: `beam-slurm plan: `)."""
        stream = stream or sys.stderr
        n = len(self.problems)
        print(f"{prefix}invalid configuration ({n} problem{'s' if n != 1 else ''}){what}", file=stream)
        for p in self.problems:
            print(f"  - {p}", file=stream)


class BadDataInput(UserError):
    """A setting, a source file or an output directory the stage cannot use; the message names it and the fix."""
