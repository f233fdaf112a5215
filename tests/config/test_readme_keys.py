"""README's Configuration section lists every schema key, section by section, and nothing the schema lacks."""
from __future__ import annotations

import re
from dataclasses import fields, is_dataclass
from pathlib import Path

from beam_slurm.config.schema import BeamConfig

README = Path(__file__).resolve().parents[2] / "README.md"


def schema_sections() -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {"top level": []}
    for field in fields(BeamConfig):
        value = field.default_factory() if callable(field.default_factory) else None
        if is_dataclass(value):
            sections[f"`{field.name}.*`"] = [f.name for f in fields(value)]
        else:
            sections["top level"].append(field.name)
    return sections


def readme_sections() -> dict[str, list[str]]:
    text = README.read_text()
    configuration = text[text.index("## Configuration"):]
    configuration = configuration[:configuration.index("\n## ", 1)]
    listed = {}
    for line in configuration.splitlines():
        match = re.match(r"^- (top level|`\w+\.\*`): (.+)$", line)
        if match:
            listed[match.group(1)] = [name.strip() for name in match.group(2).split(",")]
    return listed


def test_readme_lists_every_schema_key_and_no_other():
    assert readme_sections() == schema_sections()
