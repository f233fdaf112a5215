"""The documentation site's tests: docs/ holds the generators of the reference pages, importable by name here."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
if str(DOCS_DIR) not in sys.path:
    sys.path.insert(0, str(DOCS_DIR))
