"""JSON text that every JSON reader accepts: what `--json` prints and the report files hold.

Python's json writes a non-finite float as `NaN` or `Infinity`, which is not JSON (jq, JavaScript and most parsers
refuse it); a NaN in SkyRL's evaluation files would otherwise pass through. Here such a float becomes null, and
`allow_nan=False` guards the rest. Standard library only.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

NULL_WHEN_NOT_FINITE = "null when not finite"
JsonFloat = Annotated[float, NULL_WHEN_NOT_FINITE]
"""A float that may be NaN or infinite (read from a file), which `json_text` writes as null: its type in a TypedDict
of JSON output (docs/json_schemas.py makes it `number or null`; to mypy it is a float)."""


def finite(value: Any) -> Any:
    """`value` with every NaN or infinite float (in dicts, lists and tuples, at any depth) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def json_text(payload: Any, *, indent: int | None = 2, **options: Any) -> str:
    """`payload` as JSON text, non-finite floats as null (`options` go to json.dumps: default, sort_keys, ...)."""
    return json.dumps(finite(payload), indent=indent, allow_nan=False, **options)
