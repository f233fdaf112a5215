"""The argument convention every `beam-slurm` verb shares.

    beam-slurm <verb> [--flags] [INPUT ...] [key=value ...]

Settings are recipe keys, composed through Hydra; `--flags` are for what is not a setting and for the verb's inputs;
`--help` names the sections the verb reads and `--help-keys [SECTION]` lists their keys with the values of the recipe
given. Every message starts with `beam-slurm <verb>: `; bad input exits 2 before anything runs, an old spelling of a
flag or key first (OLD_SPELLINGS, naming what to use instead)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import os
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, NoReturn

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from beam_slurm.config.load import has_sweep, load_config, schema_fields
from beam_slurm.config.overrides import BARE_VALUE, hydra_value, override_key, value_at
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.validation import unusable_text_problems
from beam_slurm.core.errors import ConfigError, UserError

EXIT_USAGE = 2

# Spellings renamed before the first release -> what to use instead, by verb: a key (the old flag's value becomes
# its value), a key=value (the old flag was a switch) or a flag. Every verb's parser refuses them before anything else.
OLD_SPELLINGS: dict[str, dict[str, str]] = {
    "evaluate": {
        "--k": "eval.responses_per_problem",
        "--max-tokens": "generation.max_response_tokens",
        "--max-prompt-tokens": "generation.max_prompt_tokens",
        "--temperature": "generation.temperature",
        "--top-p": "generation.top_p",
        "--reasoning-effort": "generation.reasoning_effort",
        "--tp": "rollout.tensor_parallel",
        "--pp": "rollout.pipeline_parallel",
        "--executor": "rollout.executor_backend",
        "--limit": "eval.limit",
        "--dtype": "eval.dtype",
        "--gpu-memory-utilization": "eval.gpu_memory_utilization",
        "--request-timeout": "eval.server_request_timeout_s",
        "--max-attempts": "eval.server_max_attempts",
        "--concurrency": "eval.server_concurrency",
        "--grade-timeout": "grade.timeout_s",
        "--grade-workers": "grade.workers",
        "--enforce-eager": "eval.enforce_eager=true",
    },
    "grade": {
        "--timeout": "grade.timeout_s",
        "--memory-mb": "grade.memory_mb",
        "--workers": "grade.workers",
        "--overwrite": "--force",
    },
    "pull-container": {
        "--lock-stale-after": "container.lock_stale_after_s",
        "--lock-timeout": "container.lock_timeout_s",
        "--runtime": "container.runtime",
        "--image": "container.image",
        "--cache-dir": "container.image_cache_dir",
    },
    "prepare-data": {"data.overwrite": "--force"},
    "submit": {"data.overwrite": "--force"},  # the data stage's redo, as prepare-data's
}


@dataclass(frozen=True)
class SchemaKey:
    """One leaf setting of the recipe."""

    key: str  # Dotted key, e.g. `generation.temperature`
    default: Any  # The schema's default
    doc: str  # The docstring under the field in its dataclass


def field_docs(cls: type) -> dict[str, str]:
    """field name -> the string literal under it in the class body (read with `ast` from the class source)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, following in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(inspect.cleandoc(following.value.value).split())
    return docs


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def schema_keys() -> dict[str, SchemaKey]:
    """Every leaf key of the recipe schema, in schema order."""
    found = list(schema_fields())
    docs = {cls: field_docs(cls) for cls in dict.fromkeys(cls for _, cls, _, _ in found)}
    return {
        key: SchemaKey(key, default, docs[cls].get(f.name, ""))
        for key, cls, f, default in found
        if not dataclasses.is_dataclass(default)
    }


def keys_under(*prefixes: str) -> list[str]:
    """Schema keys equal to or below any of `prefixes` (`"data"` -> every data.* key)."""
    return [k for k in schema_keys() if any(k == p or k.startswith(p + ".") for p in prefixes)]


def _show_default(value: Any) -> str:
    return hydra_value(value) if value != "" else "''"


def keys_help(keys: Sequence[str], cfg: BeamConfig, width: int = 100) -> str:
    """The block listing `keys` with their values in `cfg` and docstrings; a non-default value names the default."""
    known = schema_keys()
    lines = [
        "settings (key=value; values of the recipe given, defaults and meanings from beam_slurm/config/schema.py):"
    ]
    for key in keys:
        entry = known[key]
        value = value_at(cfg, key)
        lines.append(f"  {key}={_show_default(value)}")
        doc = entry.doc if value == entry.default else f"{entry.doc} (schema default: {_show_default(entry.default)})"
        lines += textwrap.wrap(doc, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def section_of(key: str) -> str:
    """`cluster.nodes` -> `cluster`; a top-level key is its own section."""
    return key.split(".", 1)[0]


def sections_help(verb: str, keys: Sequence[str], width: int = 100) -> str:
    """The short form of `keys_help`: each section the verb reads, with its key count and what it holds."""
    total, read = Counter(map(section_of, schema_keys())), Counter(map(section_of, keys))
    docs = {
        f.name: " ".join((inspect.getdoc(type(_default(f))) or "").split()).split(". ")[0].rstrip(".")
        for f in dataclasses.fields(BeamConfig)
        if dataclasses.is_dataclass(_default(f))
    }
    example = next((name for name in read if name in docs), "all")
    lines = textwrap.wrap(
        f"settings (key=value), by section: `--help-keys SECTION` lists a section's keys with their "
        "values in the recipe given (recipe=NAME and the other settings typed), `--help-keys` alone "
        f"every key; e.g. `beam-slurm {verb} --help-keys {example}`.",
        width,
        break_on_hyphens=False,
    )
    single = [name for name in read if name not in docs]
    if single:
        lines += textwrap.wrap(", ".join(single), width, initial_indent="  ", subsequent_indent="  ")
    for name in (name for name in read if name in docs):
        count = f"{read[name]}" if read[name] == total[name] else f"{read[name]} of {total[name]}"
        lines += textwrap.wrap(
            f"{name:<11} {count:>8} keys  {docs[name]}", width, initial_indent="  ", subsequent_indent=" " * 29
        )
    return "\n".join(lines)


class VerbUsageError(UserError):
    """Bad command-line input of a verb; printed after the verb's prefix, exit status 2."""


def old_spelling_problem(verb: str, argv: Sequence[str]) -> str | None:
    """The first word of `argv` that OLD_SPELLINGS lists for `verb`, said with what to type instead; None if none."""
    table = OLD_SPELLINGS.get(verb, {})
    for index, word in enumerate(argv):
        name, eq, given = word.partition("=")
        new = table.get(name) if word.startswith("--") else None
        if new is not None and not new.startswith("-") and "=" not in new:  # it carried the value of a key
            value = given if eq else argv[index + 1] if index + 1 < len(argv) else None
            new = f"{new}={'VALUE' if value is None else value if BARE_VALUE.match(value) else hydra_value(value)}"
        elif new is None and not word.startswith("-") and override_key(word) in table:  # a key that is now a flag
            name = override_key(word)
            new = f"{table[name]} instead of {name}=true (and nothing instead of {name}=false)"
        if new is not None:
            return f"{name} is an old spelling, not accepted; use {new}"
    return None


class _Group:
    """An argument group whose options the verb records too (argparse keeps its own table of them private)."""

    def __init__(self, group: argparse._ArgumentGroup, record: Callable[[argparse.Action], object]) -> None:
        self._group, self._record = group, record

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        action = self._group.add_argument(*names, **kwargs)
        self._record(action)
        return action


class _Parser(argparse.ArgumentParser):
    _verb_args: VerbArgs

    def error(
        self, message: str
    ) -> NoReturn:  # argparse's own errors: the verb reports them with its prefix and exit 2
        self.print_usage(sys.stderr)
        raise VerbUsageError(message)

    def format_help(self) -> str:
        text, verb = super().format_help(), self._verb_args
        if verb.keys:
            text += "\n" + sections_help(verb.verb, verb.keys) + "\n"
        return text


@dataclass
class Parsed:
    """A verb's command line, split."""

    args: argparse.Namespace  # The verb's flags and inputs
    overrides: list[str]
    """key=value overrides for Hydra, in the order typed: for a key given twice the later wins."""


class VerbArgs:
    """The parser of one verb: its flags and inputs, the keys it reads."""

    def __init__(
        self,
        verb: str,
        description: str,
        *,
        keys: Sequence[str] = (),
        settings: bool = True,
        epilog: str | None = None,
        inputs: str = "",
    ):
        """`keys`: the schema keys the verb reads (--help names their sections, --help-keys lists them); `settings`:
        it takes key=value overrides; `inputs`: its positional inputs as the usage line names them (`RUN`)."""
        self.verb = verb
        self.prefix = f"beam-slurm {verb}: "
        self.keys = list(keys)
        self.settings = settings
        self.actions: list[argparse.Action] = []  # every option and input, in the order added
        usage = (
            " ".join(
                part
                for part in (
                    "%(prog)s [-h]",
                    "[--help-keys [SECTION]]" if self.keys else "",
                    "[--flag ...]",
                    inputs,
                    "[key=value ...]" if settings else "",
                )
                if part
            )
            if settings or inputs
            else None
        )  # None: argparse's own, naming every flag and input
        self.parser = _Parser(
            prog=f"beam-slurm {verb}",
            description=description,
            epilog=epilog,
            usage=usage,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
        )
        self.parser._verb_args = self
        if settings:
            self.add_argument(
                "overrides",
                nargs="*",
                metavar="key=value",
                help="recipe settings (Hydra overrides); the sections this verb reads are below",
            )
        if self.keys:
            self.add_argument(
                "--help-keys",
                nargs="?",
                const="all",
                metavar="SECTION",
                help="list the keys of SECTION (a section, a key, or all: the default) with "
                "the values of the recipe given, and exit",
            )

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        action = self.parser.add_argument(*names, **kwargs)
        self.actions.append(action)
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> _Group:
        return _Group(self.parser.add_argument_group(*args, **kwargs), self.actions.append)

    def option(self, word: str) -> argparse.Action | None:
        """The option `word` names (`--out`), if the verb has it."""
        return next((action for action in self.actions if word in action.option_strings), None)

    def refuse_old_spellings(self, argv: Sequence[str]) -> None:
        """Raise VerbUsageError (exit 2) at the first old spelling in argv, naming the key or flag to use."""
        problem = old_spelling_problem(self.verb, argv)
        if problem is not None:
            raise VerbUsageError(problem)

    def parse(self, argv: Sequence[str]) -> Parsed:
        """Split argv into flags and overrides. Raises VerbUsageError (`fail`: exit 2), first for an old spelling;
        --help, --help-keys exit 0."""
        self.refuse_old_spellings(argv)
        if any(word.split("=", 1)[0] == "--help-keys" for word in argv):  # as --help: no input is required
            for action in self.actions:
                action.required = False
        if self.settings:
            args = self.parser.parse_intermixed_args(list(argv))
            given = list(args.overrides)
            del args.overrides
        else:
            args, given = self.parser.parse_args(list(argv)), []
        help_keys = getattr(args, "help_keys", None)
        if help_keys and "=" in help_keys:  # `--help-keys recipe=X`: a setting, not a section
            given.append(help_keys)
            help_keys = "all"
        placed: list[tuple[int, str]] = []  # (position in argv, override): `--help-keys key=value` keeps its place
        words, used = list(argv), set()
        for text in given:
            if "=" not in text and not text.startswith("~"):
                self.parser.error(f"unexpected argument {text!r}: settings are key=value (see --help for the keys)")
            at = next((i for i, w in enumerate(words) if w == text and i not in used), len(words))
            used.add(at)
            placed.append((at, text))
        overrides = [text for _, text in sorted(placed, key=lambda item: item[0])]
        if help_keys is not None:
            self._print_keys(help_keys, overrides)
        return Parsed(args, overrides)

    def _print_keys(self, section: str, overrides: list[str]) -> None:
        """`--help-keys SECTION`: the keys the verb reads in SECTION, valued by the recipe the overrides give; exits."""
        keys = self.keys if section == "all" else [k for k in self.keys if k == section or k.startswith(section + ".")]
        if not keys:
            sections = ", ".join(dict.fromkeys(section_of(k) for k in self.keys))
            self.parser.error(f"--help-keys {section}: not a section this verb reads; use one of {sections}, or all")
        try:
            swept = has_sweep(overrides)  # a sweep's values are many: the keys are shown without them
            if swept:
                print(
                    f"{self.prefix}--help-keys: values shown without the swept {', '.join(swept)} (one per run)",
                    file=sys.stderr,
                )
            cfg = load_config([o for o in overrides if o not in swept], validate=False)
        except ConfigError as error:
            sys.exit(self.config_failed(error))
        print(keys_help(keys, cfg))
        sys.exit(0)

    def load(self, parsed: Parsed, *, validate: bool = False, environ: Mapping[str, str] | None = None) -> BeamConfig:
        """Compose the recipe with the overrides (Hydra, typed by the schema); raises ConfigError, also (unvalidated)
        for a path or name the verb reads that the file system or the batch scripts would refuse."""
        cfg = load_config(parsed.overrides, validate=validate, environ=environ)
        unusable = [] if validate else [p for p in unusable_text_problems(cfg) if p.key in self.keys]
        if unusable:
            raise ConfigError(unusable)
        return cfg

    def fail(self, message: object, status: int = EXIT_USAGE) -> int:
        """Print `beam-slurm <verb>: message` to stderr and return `status`."""
        print(f"{self.prefix}{message}", file=sys.stderr)
        return status

    def report(self, error: UserError, *, what: str = "") -> int:
        """Print a bad-input error after the verb's prefix (each problem of a ConfigError); returns 2."""
        return self.config_failed(error, what=what) if isinstance(error, ConfigError) else self.fail(error)

    def config_failed(self, error: ConfigError, *, what: str = "") -> int:
        """Print every problem of a ConfigError after the verb's prefix; returns 2."""
        error.report(prefix=self.prefix, what=what)
        return EXIT_USAGE


def table_console(file: IO[str] | None = None, *, pipe_width: int = 160) -> Console:
    """Where a verb prints its tables: the terminal's width, or COLUMNS where set (rich reads it); a log or a pipe
    without COLUMNS gets `pipe_width` columns (rich's 80 would squeeze them)."""
    console = Console(file=file)
    wide = not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit()
    return Console(file=file, width=pipe_width) if wide else console


def verb_table(title: str, **options: Any) -> Table:
    """A table in the verbs' one style: a rule under the header, one space and no border between columns."""
    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0), **options)


def _plain(cell: object) -> str:
    try:
        return Text.from_markup(str(cell)).plain
    except Exception:  # text that only looks like markup
        return str(cell)


def fit_columns(table: Table, width: int) -> bool:
    """Fix the widths of a `verb_table` wider than `width`: each column at least its longest word (no_wrap columns their
    longest cell), the room left to the columns with the longest text, so text wraps at spaces instead of splitting
    "COMPLETED". False when no widths keep every word whole (rich then folds them)."""
    lines = [
        [line for cell in (column.header, *column.cells) for line in _plain(cell).split("\n")]
        for column in table.columns
    ]
    natural = [max(map(len, cells)) for cells in lines]
    least = [
        n if c.no_wrap else max(len(w) for line in cells for w in line.split() or [""])
        for c, n, cells in zip(table.columns, natural, lines, strict=False)
    ]
    room = width - 2 * len(natural) + 1  # one space of padding and one divider between columns
    if sum(natural) <= room:
        return True
    if sum(least) > room:
        if sum(least) > room + len(natural):
            return False
        table.padding, room = (0, 0, 0, 0), room + len(natural)  # the divider alone keeps the words whole
    spare, widths = room - sum(least), list(least)
    wanting = sorted(range(len(widths)), key=lambda i: natural[i] - least[i])
    for place, index in enumerate(wanting):  # the smallest wants are met whole, the longest text takes the rest
        given = min(natural[index] - least[index], spare // (len(wanting) - place))
        widths[index] += given
        spare -= given
    for column, chosen in zip(table.columns, widths, strict=False):
        column.width = chosen
    return True
