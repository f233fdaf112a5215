"""The JSON Schema of each verb's `--json` output, derived from the TypedDicts that build it, and the reference page
that shows them.

Each verb that prints JSON names the type of its output in its module (`beam_slurm/verbs/<verb>.py`: `JSON_OUTPUT`);
the builders are annotated with those types, so mypy checks them. Here pydantic turns the types into JSON Schema
(Draft 2020-12) and jsonschema checks output against it; the package itself needs neither (the `docs` extra installs
them). Every object with listed keys is closed (`additionalProperties: false`): a key the types do not document fails.

    verb_schemas()                 verb -> its schema
    validate(verb, data)           raises JsonOutputError, naming each place the data breaks the schema
    json_output_page(out_dir)      out_dir/json-output.md and out_dir/json/<verb>.schema.json
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import io
import json
import operator
import sys
import tokenize
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import typing_extensions

from beam_slurm.cli import VERBS, verb_module
from beam_slurm.core.json_text import NULL_WHEN_NOT_FINITE

DOCS = Path(__file__).resolve().parent
if str(DOCS) not in sys.path:  # references.py beside this file, wherever this is run from
    sys.path.insert(0, str(DOCS))
from references import GENERATED, code, prose, table  # noqa: E402  (its Markdown helpers: one way of escaping)

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FOLDER = "json"  # beside json-output.md: the page links json/<verb>.schema.json
KEY_PATTERNS: dict[str, dict[str, dict[str, Any]]] = {
    # Keys a TypedDict cannot name because they depend on the data: pass@j for j = 1, 2, 4, ... up to k, and k.
    "GradeMetrics": {"^pass@[1-9][0-9]*$": {"type": "number", "description": "unbiased pass@j"}},
}
"""Type name -> JSON Schema `patternProperties` its object also takes."""


class JsonOutputError(ValueError):
    """A verb's JSON output does not match its schema; the message names every place and why."""


# --- The types ------------------------------------------------------------------------------------------------------


def json_output_types() -> dict[str, Any]:
    """verb -> the TypedDict its `--json` prints (`JSON_OUTPUT` of its module), for every verb that has one."""
    found = {verb: getattr(importlib.import_module(verb_module(verb)), "JSON_OUTPUT", None) for verb in VERBS}
    return {verb: output for verb, output in found.items() if output is not None}


@functools.cache
def _module_notes(module_name: str) -> dict[str, tuple[dict[str, str], list[str]]]:
    """TypedDict name -> (key -> its note, its bases as written), from the module's source. A key's note: a docstring
    under it, a comment at the end of its line, else the comment lines right above it. The entry "" of a type is its
    own note where no docstring can hold one (the functional form `Name = TypedDict("Name", {...})`: the comment lines
    above it)."""
    try:
        source = inspect.getsource(sys.modules[module_name])
    except (KeyError, OSError, TypeError):
        return {}
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    lines = source.splitlines()

    def above(line: int) -> str:
        """The comment lines (alone on their lines) right above `line`, joined."""
        found: list[str] = []
        while line - 1 in comments and lines[line - 2].lstrip().startswith("#"):
            line -= 1
            found.insert(0, comments[line])
        return " ".join(found)

    def note(first: int, last: int) -> str:
        trailing = next((comments[n] for n in range(last, first - 1, -1) if n in comments), "")
        return trailing or above(first)

    notes: dict[str, tuple[dict[str, str], list[str]]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            keys: dict[str, str] = {}
            body = node.body
            for index, item in enumerate(body):
                if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                    continue
                following = body[index + 1] if index + 1 < len(body) else None
                docstring = (
                    following.value.value
                    if isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)
                    else ""
                )
                text = inspect.cleandoc(docstring) if docstring else note(item.lineno, item.end_lineno or item.lineno)
                keys[item.target.id] = " ".join(text.split())
            notes[node.name] = (keys, [ast.unparse(base) for base in node.bases])
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", getattr(node.value.func, "attr", "")) == "TypedDict"
            and len(node.value.args) == 2
            and isinstance(node.value.args[0], ast.Constant)
            and isinstance(node.value.args[1], ast.Dict)
        ):
            fields = node.value.args[1]
            keys = {"": above(node.lineno)}
            for key, value in zip(fields.keys, fields.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    keys[key.value] = note(key.lineno, value.end_lineno or value.lineno)
            notes[str(node.value.args[0].value)] = (keys, [])
    return notes


def _class_notes(tp: Any) -> dict[str, str]:
    """Key -> note of a TypedDict, its bases' keys included (Python 3.11 keeps no bases of a TypedDict: the source
    names them)."""
    own, bases = _module_notes(tp.__module__).get(tp.__name__, ({}, []))
    module = sys.modules[tp.__module__]
    inherited: dict[str, str] = {}
    for name in bases:
        try:
            base = functools.reduce(getattr, name.split("."), module)
        except AttributeError:
            continue
        if _is_typed_dict(base):
            inherited.update({key: text for key, text in _class_notes(base).items() if key})
    return {**inherited, **own}


def _is_typed_dict(tp: Any) -> bool:
    return typing.is_typeddict(tp) or typing_extensions.is_typeddict(tp)


def _for_pydantic(tp: Any, built: dict[int, Any]) -> Any:
    """`tp` with every TypedDict in it rebuilt as a typing_extensions.TypedDict that carries its notes: pydantic
    reads typing.TypedDict only from Python 3.12 on, and Python 3.11's `__required_keys__` misses a NotRequired written
    as a string annotation (`from __future__ import annotations`)."""
    if _is_typed_dict(tp):
        if id(tp) not in built:
            built[id(tp)] = _rebuilt(tp, built)
        return built[id(tp)]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None or not args or origin is typing.Literal:
        return tp
    if origin is typing_extensions.NotRequired or origin is typing_extensions.Required:
        return origin[_for_pydantic(args[0], built)]
    if origin is typing.Annotated:
        if NULL_WHEN_NOT_FINITE in tp.__metadata__:  # JsonFloat: json_text writes NaN and infinities as null
            return _for_pydantic(args[0], built) | None
        return typing.Annotated[(_for_pydantic(args[0], built), *tp.__metadata__)]
    parts = tuple(_for_pydantic(arg, built) for arg in args)
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(operator.or_, parts)
    return origin[parts]


def _rebuilt(tp: Any, built: dict[int, Any]) -> Any:
    hints = typing.get_type_hints(tp, include_extras=True)
    notes = _class_notes(tp)
    fields = {}
    for key, hint in hints.items():
        origin = typing.get_origin(hint)
        if origin is typing_extensions.NotRequired or origin is typing_extensions.Required:
            required, hint = origin is typing_extensions.Required, typing.get_args(hint)[0]
        else:
            required = key in tp.__required_keys__
        described = typing.Annotated[_for_pydantic(hint, built), pydantic.Field(description=notes.get(key) or None)]
        fields[key] = described if required else typing_extensions.NotRequired[described]
    rebuilt = typing_extensions.TypedDict(tp.__name__, fields)
    rebuilt.__doc__ = " ".join((tp.__doc__ or notes.get("") or "").split()) or None  # a paragraph, one line
    rebuilt.__module__ = tp.__module__
    return rebuilt


# --- The schemas ----------------------------------------------------------------------------------------------------


def _closed(node: Any) -> None:
    """Every object with listed keys takes no other key; the types' key patterns added where they have some. A key's
    title (pydantic's `Job Id` for job_id) goes: the key says it."""
    if isinstance(node, dict):
        if "properties" in node:
            node.setdefault("additionalProperties", False)
            for field in node["properties"].values():
                field.pop("title", None)
            patterns = KEY_PATTERNS.get(node.get("title", ""))
            if patterns:
                node["patternProperties"] = copy.deepcopy(patterns)
        for value in node.values():
            _closed(value)
    elif isinstance(node, list):
        for value in node:
            _closed(value)


def schema_of(verb: str, output: Any) -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of `output`, the TypedDict of `verb --json`."""
    schema = pydantic.TypeAdapter(_for_pydantic(output, {})).json_schema(mode="serialization")
    _closed(schema)
    return {"$schema": DRAFT, **schema, "title": f"beam-slurm {verb} --json"}


@functools.cache
def _schemas() -> dict[str, dict[str, Any]]:
    return {verb: schema_of(verb, output) for verb, output in json_output_types().items()}


def verb_schemas() -> dict[str, dict[str, Any]]:
    """verb -> the JSON Schema of its `--json` output, for every verb that prints JSON."""
    return copy.deepcopy(_schemas())


def validate(verb: str, data: Any) -> None:
    """Raise JsonOutputError unless `data` is what `verb --json` may print; the message lists each error (its place
    as a JSON path, and why), at most ten."""
    schemas = _schemas()
    if verb not in schemas:
        raise JsonOutputError(f"{verb}: no such verb prints JSON (those that do: {', '.join(sorted(schemas))})")
    validator = jsonschema.Draft202012Validator(schemas[verb])
    errors = sorted(validator.iter_errors(data), key=lambda error: list(map(str, error.absolute_path)))
    if errors:
        shown = [f"  {error.json_path}: {error.message}" for error in errors[:10]]
        more = [f"  ... and {len(errors) - 10} more"] if len(errors) > 10 else []
        raise JsonOutputError("\n".join([f"beam-slurm {verb} --json does not match its schema:", *shown, *more]))


# --- The page -------------------------------------------------------------------------------------------------------


def _anchor(verb: str, name: str = "") -> str:
    return f"{verb}-{name.lower()}" if name else verb


def _type_text(schema: dict[str, Any], verb: str) -> str:
    """A schema as a reader says its type: `list of [StatusJob](#status-statusjob)`, `integer or null`."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(verb, name)})"
    if "anyOf" in schema:
        return " or ".join(_type_text(option, verb) for option in schema["anyOf"])
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema:
        return "one of " + ", ".join(code(json.dumps(value)) for value in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        if "prefixItems" in schema:
            return "[" + ", ".join(_type_text(item, verb) for item in schema["prefixItems"]) + "]"
        return "list of " + _grouped(_type_text(schema.get("items", {}), verb))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "object, each value " + _grouped(_type_text(schema["additionalProperties"], verb))
    return kind or "any JSON value"


def _grouped(text: str) -> str:
    """`(number or null)` inside `list of ...`: what the list holds, not a list or a null."""
    return f"({text})" if " or " in text or ", " in text else text


def _key_rows(schema: dict[str, Any], verb: str) -> list[list[str]]:
    required = set(schema.get("required", ()))
    rows = [
        [
            code(key) + ("" if key in required else " (not always there)"),
            _type_text(field, verb),
            prose(field.get("description", "")),
        ]
        for key, field in schema.get("properties", {}).items()
    ]
    rows += [
        [code(pattern) + " (keys matching)", _type_text(field, verb), prose(field.get("description", ""))]
        for pattern, field in schema.get("patternProperties", {}).items()
    ]
    return rows


def _objects_in_order(schema: dict[str, Any]) -> list[str]:
    """The names of the objects a schema refers to, in the order a reader meets them from the top."""
    definitions = schema.get("$defs", {})
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str):
                name = reference.rsplit("/", 1)[-1]
                if name not in found:
                    found.append(name)
                    walk(definitions.get(name, {}))
            for key, value in node.items():
                if key != "$defs":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return found


def verb_section(verb: str, schema: dict[str, Any]) -> list[str]:
    """The page's section of one verb: what it prints, its schema file, its keys, then every object inside."""
    lines = [f"## {verb} {{#{_anchor(verb)}}}", ""]
    if schema.get("description"):
        lines += [prose(" ".join(schema["description"].split())), ""]
    lines += [
        f"Flags: [`{verb}`](command-line.md#{verb}). Schema: [{SCHEMA_FOLDER}/{verb}.schema.json]"
        f"({SCHEMA_FOLDER}/{verb}.schema.json).",
        "",
    ]
    lines += table(["Key", "Type", "Meaning"], _key_rows(schema, verb))
    for name in _objects_in_order(schema):
        inner = schema["$defs"][name]
        lines += ["", f"### {name} {{#{_anchor(verb, name)}}}", ""]
        if inner.get("description"):
            lines += [prose(" ".join(inner["description"].split())), ""]
        lines += table(["Key", "Type", "Meaning"], _key_rows(inner, verb))
    return lines


def json_output_page(out_dir: Path) -> None:
    """Write out_dir/json-output.md (a section per verb: what it prints, a link to its schema, a table of its keys and
    of each object inside) and out_dir/json/<verb>.schema.json."""
    schemas = verb_schemas()
    folder = Path(out_dir) / SCHEMA_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for verb, schema in schemas.items():
        (folder / f"{verb}.schema.json").write_text(json.dumps(schema, indent=2) + "\n")
    lines = [
        GENERATED.format(source="the TypedDicts of the verbs' JSON output (beam_slurm/verbs/, docs/json_schemas.py)"),
        "",
        "# JSON output",
        "",
        "With `--json` these verbs print one JSON object on stdout; messages stay on stderr and the exit status is the "
        "one without `--json`. Numbers are numbers (seconds end in `_s`), job ids are text as `sbatch --parsable` "
        "prints them, times are ISO 8601 with their offset, and `null` stands for what is unknown or unbounded.",
        "",
        "Each verb's JSON Schema (Draft 2020-12) is generated from the types that build its output, and the tests "
        "check the real output of every verb against it. An object takes only the keys listed: a new key is a change "
        "of the types, and of this page.",
        "",
    ]
    lines += table(
        ["Verb", "Schema"],
        [
            [f"[{verb}](#{_anchor(verb)})", f"[{verb}.schema.json]({SCHEMA_FOLDER}/{verb}.schema.json)"]
            for verb in schemas
        ],
    )
    for verb, schema in schemas.items():
        lines += [""] + verb_section(verb, schema)
    (Path(out_dir) / "json-output.md").write_text("\n".join(lines) + "\n")
