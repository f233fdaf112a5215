"""Each module logs to `logging.getLogger(__name__)`; the entry that runs (a training attempt, a Ray node, a driver, a
verb) writes its loggers' lines while it runs (`installed`), as its users read them. Nothing else is configured."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path


class LineHandler(logging.Handler):
    """`prefix() + message` on sys.<stream> (looked up per line: a redirected stream counts) and in `path`, flushed."""

    def __init__(self, prefix: str | Callable[[], str], stream: str, path: Path | None):
        super().__init__()
        self.key, self.stream = (prefix, stream, path), stream
        self.prefix = prefix if callable(prefix) else lambda: prefix
        self.file = open(path, "a") if path is not None else None  # closed by `installed`

    def emit(self, record: logging.LogRecord) -> None:
        line = self.prefix() + record.getMessage()
        for out in (getattr(sys, self.stream), self.file):
            if out is not None:
                print(line, file=out, flush=True)


@contextlib.contextmanager
def installed(
    names: str | tuple[str, ...], prefix: str | Callable[[], str] = "", path: Path | None = None, stream: str = "stderr"
) -> Iterator[None]:
    """While the block runs, one handler writes the INFO and higher lines of the loggers `names` (and those below) as
    `prefix + message` (`prefix`: a string or a function called per line) on `stream` ("stderr" or "stdout") and in
    `path`; then it and the levels go (propagation is never touched). Installed again inside: no line twice."""
    handler = LineHandler(prefix, stream, path)
    loggers = [logging.getLogger(name) for name in ((names,) if isinstance(names, str) else names)]
    loggers = [one for one in loggers if not any(getattr(h, "key", None) == handler.key for h in one.handlers)]
    levels = [one.level for one in loggers]
    for one in loggers:
        one.addHandler(handler)
        one.setLevel(min(one.getEffectiveLevel(), logging.INFO))
    try:
        yield
    finally:
        for one, level in zip(loggers, levels, strict=True):
            one.removeHandler(handler)
            one.setLevel(level)
        if handler.file is not None:
            handler.file.close()
