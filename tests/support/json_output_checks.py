"""A verb's `--json` output checked against its JSON Schema (docs/json_schemas.py, generated from the types that build
the output): the scenarios call `assert_json_valid` where they read a verb's JSON, so real jobs' output is checked too.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from docs_site import docs_module


def json_schemas() -> ModuleType:
    """docs/json_schemas.py."""
    return docs_module("json_schemas")


def assert_json_valid(verb: str, data: Any) -> None:
    """Fail, naming every place and why, unless `data` is what `beam-slurm VERB --json` may print."""
    schemas = json_schemas()
    try:
        schemas.validate(verb, data)
    except schemas.JsonOutputError as error:
        raise AssertionError(str(error)) from None
