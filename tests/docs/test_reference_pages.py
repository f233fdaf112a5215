"""The generated references cover the code whole: every schema key on the configuration page with its type, default,
variable, recipe values and docstring; every verb and flag on the command-line page. Read as the site shows them
(rendered by Python-Markdown, as MkDocs renders them), so an unescaped character that breaks a table fails here."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import markdown
import pytest
from docs_site import docs_module

from beam_slurm.cli import VERBS, verb_module
from beam_slurm.config.overrides import hydra_value
from beam_slurm.config.schema import BeamConfig

references = docs_module("references")


def leaf_keys(cls: type = BeamConfig, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, default) of every setting of the schema, nested sections included."""
    for field in dataclasses.fields(cls):
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = field.default
        if dataclasses.is_dataclass(default):
            yield from leaf_keys(type(default), f"{prefix}{field.name}.")
        else:
            yield prefix + field.name, default


class _TableRows(HTMLParser):
    """The text of every table cell of a page, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def rendered_rows(page: str) -> list[list[str]]:
    html = markdown.markdown(page, extensions=["tables", "attr_list", "fenced_code"])
    parser = _TableRows()
    parser.feed(html)
    return parser.rows


def as_rendered(doc: str) -> str:
    """A docstring as the page shows it: code spans lose their backticks, everything else reads as written."""
    return references.CODE_SPAN.sub(lambda span: span.group(2), doc)


@pytest.fixture(scope="module")
def configuration_rows() -> dict[str, list[str]]:
    rows = rendered_rows(references.configuration_page())
    header = ["Key", "Type", "Default", "Environment", "Recipes", "Description"]
    assert all(len(row) == len(header) for row in rows), [row for row in rows if len(row) != len(header)][:3]
    return {row[0]: row for row in rows if row != header}


def test_every_schema_key_is_on_the_configuration_page_with_its_default(configuration_rows):
    keys = dict(leaf_keys())
    assert set(configuration_rows) == set(keys)
    for key, default in keys.items():
        if isinstance(default, dict):
            expected = "{" + ", ".join(f"{name}: {hydra_value(value)}" for name, value in default.items()) + "}"
        else:
            expected = "''" if default == "" else hydra_value(default)
        assert configuration_rows[key][2] == expected, key


def test_every_key_has_its_docstring_and_type(configuration_rows):
    from beam_slurm.config.verb_args import schema_keys

    for key, entry in schema_keys().items():
        row = configuration_rows[key]
        assert entry.doc, f"{key} has no docstring under its field in the schema"
        assert " ".join(row[5].split()) == as_rendered(entry.doc), key
        assert row[1], key
    assert configuration_rows["precision"][1] == "Literal['bf16', 'mxfp8']"
    assert configuration_rows["cluster.partition"][1] == "str | None"


def test_variables_and_recipe_values_are_shown(configuration_rows):
    # What conf/config.yaml reads from the environment, and where a recipe differs from the schema's default.
    assert configuration_rows["paths.model_path"][3] == "MODEL_PATH"
    assert configuration_rows["cluster.time_limit"][3] == "SBATCH_TIMELIMIT"
    assert configuration_rows["cluster.nodes"][3] == ""
    assert "lora_16gpu: 2" in configuration_rows["cluster.nodes"][4].split("\n")
    assert "mxfp8_64gpu: 0" in configuration_rows["lora.rank"][4].split("\n")
    assert configuration_rows["seed"][4] == ""  # every recipe keeps the default


def test_the_recipes_do_not_depend_on_the_builders_environment(monkeypatch):
    monkeypatch.setenv("MODEL_PATH", "/on/the/builders/machine")
    monkeypatch.setenv("BEAM_SLURM_CLUSTER", "sandbox")
    page = references.configuration_page()
    assert "/on/the/builders/machine" not in page
    assert os.environ["MODEL_PATH"] == "/on/the/builders/machine"  # put back afterwards


def flags_of(verb: str) -> list[str]:
    parser = importlib.import_module(verb_module(verb)).build_parser()
    return [option for action in parser.actions if action.help != argparse.SUPPRESS for option in action.option_strings]


@pytest.fixture(scope="module")
def command_line_page() -> str:
    return references.command_line_page()


def test_every_verb_and_flag_is_on_the_command_line_page(command_line_page):
    page = command_line_page
    sections = dict(
        (match.group(1), body)
        for match, body in zip(
            re.finditer(r"^## (\S+) \{#\S+\}$", page, re.M),
            re.split(r"^## \S+ \{#\S+\}$", page, flags=re.M)[1:],
            strict=True,
        )
    )
    assert list(sections) == list(VERBS)
    for verb in VERBS:
        assert f"usage: beam-slurm {verb}" in sections[verb], verb
        for flag in flags_of(verb):
            assert f"`{flag}`" in sections[verb], f"{verb} {flag}"
    assert "`data,container,train`" in sections["submit"]  # a default


def test_command_line_tables_keep_their_columns(command_line_page):
    rows = rendered_rows(command_line_page)
    assert rows and all(len(row) in (2, 4) for row in rows)


def test_prose_escapes_what_markdown_would_read_as_markup():
    text = "names or PREFIX_* patterns (SKYRL_*), <jobid>/<node>.json, {mail-type: END}, a|b, `x | y_*`"
    html = markdown.markdown(f"| a |\n| --- |\n| {references.prose(text)} |", extensions=["tables", "attr_list"])
    rows = _TableRows()
    rows.feed(html)
    assert rows.rows[1] == [as_rendered(text)]
