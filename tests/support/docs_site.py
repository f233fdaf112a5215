"""The documentation site's generators (docs/references.py, docs/json_schemas.py), importable by name in tests: docs/ is
the site's folder, not a package, so it goes on sys.path here (a conftest.py under tests/docs would shadow the one the
sandbox tests import by name)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parents[2] / "docs"


def docs_module(name: str) -> ModuleType:
    if str(DOCS) not in sys.path:
        sys.path.insert(0, str(DOCS))
    return importlib.import_module(name)
