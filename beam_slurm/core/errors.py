"""The base of every "bad input" error: what is wrong, the setting (and its environment variable) and the fix. A verb
prints it without a traceback and exits 2; anything else that escapes stays a traceback."""

from __future__ import annotations


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
