"""Rewrite the golden container commands after an intended change of rendering; review the diff before committing.

    .venv/bin/python tests/config/update_golden.py

The test (tests/config/test_runtime.py) only compares; it never writes these files.
"""

from __future__ import annotations

import sys
from pathlib import Path

from golden_commands import GOLDEN, RENDERERS, golden_text


def main(golden_dir: Path = GOLDEN) -> int:
    for name in RENDERERS:
        path = golden_dir / name
        text = golden_text(name)
        if path.exists() and path.read_text() == text:
            print(f"{path}: unchanged")
            continue
        path.write_text(text)
        print(f"{path}: rewritten; check `git diff {path}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
