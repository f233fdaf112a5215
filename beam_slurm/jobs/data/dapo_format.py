"""The DAPO row format all three outputs share, its schema check, and the prompt template.

A row: data_source (string), prompt (list of {content, role} with one user message), ability ("MATH"), reward_model
{ground_truth (string), style ("rule-lighteval/MATH_v2")}, extra_info (struct, free form)."""

from __future__ import annotations

import re

import pyarrow as pa

from beam_slurm.core.errors import BadDataInput

KEY_COLUMNS = ("data_source", "prompt", "ability", "reward_model")
"""Columns that identify a row for deduplication (SkyRL's rule); extra_info is deliberately not among them."""

PROMPT_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
PROMPT_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
ABILITY = "MATH"
REWARD_STYLE = "rule-lighteval/MATH_v2"

# Field order as in the published DAPO files, so the three outputs have one schema.
DAPO_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", pa.struct([("index", pa.string())])),
    ]
)

_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")


def dapo_prompt(problem: str) -> list[dict[str, str]]:
    """The DAPO chat prompt for one problem statement."""
    return [{"content": PROMPT_PREFIX + problem + PROMPT_SUFFIX, "role": "user"}]


def canonical_integer(text: str) -> str | None:
    """ "025" -> "25", " 7 " -> "7"; None when the text is not an integer."""
    return str(int(text)) if _INTEGER.match(text) else None


def _is_string(type_: pa.DataType) -> bool:
    return pa.types.is_string(type_) or pa.types.is_large_string(type_)


def check_dapo_schema(schema: pa.Schema, where: str) -> None:
    """Raise BadDataInput naming the file and the column when the schema is not the DAPO format."""
    missing = [c for c in KEY_COLUMNS if c not in schema.names]
    if missing:
        raise BadDataInput(
            f"{where}: missing column(s) {', '.join(missing)}; a DAPO-format file has "
            f"{', '.join(KEY_COLUMNS)} (+ extra_info); found {', '.join(schema.names) or 'none'}"
        )

    def wrong(column: str, expected: str, found: pa.DataType) -> BadDataInput:
        return BadDataInput(f"{where}: column {column} has type {found}, expected {expected}")

    for column in ("data_source", "ability"):
        if not _is_string(schema.field(column).type):
            raise wrong(column, "string", schema.field(column).type)
    prompt = schema.field("prompt").type
    if not (
        (pa.types.is_list(prompt) or pa.types.is_large_list(prompt))
        and pa.types.is_struct(prompt.value_type)
        and all(
            prompt.value_type.get_field_index(name) >= 0 and _is_string(prompt.value_type.field(name).type)
            for name in ("content", "role")
        )
    ):
        raise wrong("prompt", "list<struct<content: string, role: string>>", prompt)
    reward = schema.field("reward_model").type
    if not pa.types.is_struct(reward) or reward.get_field_index("ground_truth") < 0:
        raise wrong("reward_model", "struct<ground_truth: string, style: string>", reward)
    if not _is_string(reward.field("ground_truth").type):
        raise wrong("reward_model.ground_truth", "string", reward.field("ground_truth").type)
