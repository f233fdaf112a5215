"""Writing and reading `key=value` overrides: values rendered so Hydra's parser (and OmegaConf behind it) reads
back exactly the value given, `${` kept literal, and the key of an override as typed. A leaf: the loader, the verb
arguments and the SkyRL command line all use it."""

from __future__ import annotations

import re
from typing import Any

BARE_VALUE = re.compile(r"^[A-Za-z0-9_/.+@%:-]+$")
_HYDRA_WORDS = {"null", "true", "false", "nan", "inf", "-inf", "+inf"}
_NUMBER = re.compile(r"^[+-]?(\d[\d_]*)?(\.\d*)?([eE][+-]?\d+)?$")


def scalar_text(value: Any) -> str | None:
    """None, a bool or a number as both Hydra's and OmegaConf's CLI grammars read it back; None for anything else."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return None


def hydra_value(value: Any) -> str:
    """`value` written so that Hydra's override parser reads back exactly `value` (None, bool, number, str, list);
    other strings than plain words are single-quoted and escaped, so `,`, spaces, `=` and `${...}` stay literal."""
    scalar = scalar_text(value)
    if scalar is not None:
        return scalar
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if text and BARE_VALUE.match(text) and text.lower() not in _HYDRA_WORDS and not _NUMBER.match(text):
        return text
    # OmegaConf: `\${` keeps `${` literal (backslashes before it are doubled). Hydra's quoted string: backslashes
    # before a quote or at the end are doubled, the quote itself escaped; other backslashes are literal.
    body = escape_interpolation(text)
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", body)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    return f"'{body}'"


def escape_interpolation(text: str) -> str:
    r"""`text` with every `${` escaped, so OmegaConf reads it as literal text: it reads `\${` as a literal `${`, and 2n
    backslashes before `${` as n backslashes and a reference, so n backslashes before a literal `${` become 2n + 1."""
    return re.sub(r"(\\*)\$\{", lambda m: "\\" * (2 * len(m.group(1)) + 1) + "${", text)


def escape_values(value: Any) -> Any:
    """`value` with `escape_interpolation` applied to every string inside lists, tuples and dicts."""
    if isinstance(value, str):
        return escape_interpolation(value)
    if isinstance(value, (list, tuple)):
        return [escape_values(v) for v in value]
    if isinstance(value, dict):
        return {k: escape_values(v) for k, v in value.items()}
    return value


def override(key: str, value: Any) -> str:
    """One `key=value` override for `value` (see hydra_value)."""
    return f"{key}={hydra_value(value)}"


def value_at(cfg: Any, key: str) -> Any:
    """The value of dotted `key` in a typed recipe object, read as plain attributes (no interpolation)."""
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return list(value) if isinstance(value, (list, tuple)) else value


def override_key(text: str) -> str:
    """The dotted key of an override (`+a.b=1`, `~a.b`, `a.b=1` -> `a.b`)."""
    return text.split("=", 1)[0].lstrip("+~")
