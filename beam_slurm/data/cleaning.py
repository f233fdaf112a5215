"""SkyRL's cleaning rule for DAPO-format parquet files, streamed so memory stays far below the input's size.

The rule (SkyRL examples/algorithms/dapo/data_preprocess_dapo_aime.py, written there with pandas + polars):
  1. drop exact duplicates on (data_source, prompt, ability, reward_model);
  2. drop every row whose prompt carries more than one distinct reward_model among the remaining rows.
SkyRL keeps an arbitrary row of each duplicate group in arbitrary order; we keep the first occurrence, in input
order, so the output is deterministic (the same rows as polars `unique(keep="first", maintain_order=True)`).

How it streams: each batch's key columns are turned into one self-delimiting byte string per row (so two rows get
the same string exactly when their keys are equal, nested lists, structs and nulls included). Arrow's hash kernel
finds each batch's distinct keys; a 128-bit BLAKE2b digest per distinct key is checked against the digests seen so
far (a collision is ~1e-27 likely at this size, far below hardware error rates). First occurrences go to a
candidates file beside the output, with a prompt id; the distinct reward_model digests per prompt are tracked in
memory. A final pass over the (small) candidates file drops the conflicting prompts. Memory: one batch plus 16 bytes
and a few words per distinct key.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from beam_slurm.data.dapo_format import KEY_COLUMNS, check_dapo_schema
from beam_slurm.data.errors import BadDataInput

Progress = Callable[[int], None]
"""Called with the number of rows just processed."""

PROMPT_ID_COLUMN = "__prompt_id"
COMPRESSION = "zstd"


@dataclass
class CleaningStats:
    """Row counts of one cleaned file, for the manifest and the log."""

    rows_in: int
    """Rows read from the source file(s)."""
    rows_distinct: int
    """Rows left after dropping exact duplicates on the key columns."""
    rows_out: int
    """Rows written: distinct rows whose prompt has a single reward_model."""
    prompts_conflicting: int
    """Distinct prompts dropped because they carry more than one distinct reward_model."""
    answers_canonicalised: int
    """Ground truths rewritten to canonical integer form before cleaning (AIME only)."""


def _large(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.large_string())


_NULL = _large("N")
_EMPTY = _large("")


def encode_rows(array: pa.Array) -> pa.Array:
    """One byte string per row, equal for two rows exactly when their values are equal (a prefix-free code).

    null -> "N"; string -> "S<bytes>:<text>"; number/bool -> "V<text>;"; struct -> "T" + its fields' codes;
    list -> "L<count>:" + its elements' codes.
    """
    type_ = array.type
    if pa.types.is_null(type_):
        return pa.array(["N"] * len(array), pa.large_string())
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        text = array.cast(pa.large_string())
        lengths = pc.binary_length(text).cast(pa.large_string())
        encoded = pc.binary_join_element_wise(_large("S"), lengths, _large(":"), text, _EMPTY)
    elif pa.types.is_struct(type_):
        parts = [encode_rows(child) for child in array.flatten()]
        encoded = pc.binary_join_element_wise(_large("T"), *parts, _EMPTY)
        if array.null_count:
            encoded = pc.if_else(array.is_valid(), encoded, _NULL)
    elif pa.types.is_list(type_) or pa.types.is_large_list(type_):
        counts = pc.list_value_length(array).cast(pa.int64())
        inner = encode_rows(array.flatten())
        offsets = pa.concat_arrays(
            [pa.array([0], pa.int64()), pc.cumulative_sum(pc.fill_null(counts, 0))]
        )
        joined = pc.binary_join(pa.LargeListArray.from_arrays(offsets, inner), _EMPTY)
        encoded = pc.binary_join_element_wise(_large("L"), counts.cast(pa.large_string()), _large(":"), joined, _EMPTY)
    else:
        try:
            text = array.cast(pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise BadDataInput(f"cannot compare values of type {type_} in a key column") from None
        encoded = pc.binary_join_element_wise(_large("V"), text, _large(";"), _EMPTY)
    return pc.fill_null(encoded, _NULL)


def _digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=16).digest()


def open_parquet(path: Path, where: str) -> pq.ParquetFile:
    """Open a parquet file, turning a truncated or corrupt file into BadDataInput."""
    try:
        return pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, OSError) as error:
        raise BadDataInput(f"{where}: not a readable parquet file (truncated or corrupt?): {error}") from None


def canonicalise_ground_truth(reward_model: pa.StructArray) -> tuple[pa.StructArray, int]:
    """Rewrite integer ground truths to canonical form ("025" -> "25", "+7" -> "7"); returns (array, rewritten)."""
    truth = reward_model.flatten()[reward_model.type.get_field_index("ground_truth")]
    is_integer = pc.fill_null(pc.match_substring_regex(truth, r"^\s*[+-]?\d+\s*$"), False)
    if not pc.any(is_integer).as_py():
        return reward_model, 0
    canonical = pc.utf8_trim_whitespace(truth)
    canonical = pc.replace_substring_regex(canonical, r"^\+", "")
    canonical = pc.replace_substring_regex(canonical, r"^(-?)0+(\d)", r"\1\2")
    canonical = pc.replace_substring_regex(canonical, r"^-0$", "0")
    new_truth = pc.if_else(is_integer, canonical, truth)
    rewritten = pc.sum(pc.fill_null(pc.not_equal(new_truth, truth), False)).as_py() or 0
    if not rewritten:
        return reward_model, 0
    children = reward_model.flatten()
    children[reward_model.type.get_field_index("ground_truth")] = new_truth
    rebuilt = pa.StructArray.from_arrays(children, fields=list(reward_model.type), mask=reward_model.is_null())
    return rebuilt, rewritten


def _check_ground_truth(reward_model: pa.Array, first_row: int, where: str) -> None:
    truth = reward_model.flatten()[reward_model.type.get_field_index("ground_truth")]
    empty = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(truth), ""), True)
    if pc.any(empty).as_py():
        bad = pc.indices_nonzero(empty)
        raise BadDataInput(
            f"{where}: empty reward_model.ground_truth at row {first_row + bad[0].as_py()} "
            f"({len(bad)} such row(s) in rows {first_row}-{first_row + len(reward_model) - 1}); "
            "every row needs a non-empty answer"
        )


def _output_schema(schema: pa.Schema) -> pa.Schema:
    # pandas metadata describes the source's index and row count, which no longer hold after cleaning.
    metadata = {k: v for k, v in (schema.metadata or {}).items() if k != b"pandas"}
    return schema.with_metadata(metadata or None)


def clean_dapo_files(
    files: list[Path],
    destination: Path,
    *,
    where: str,
    batch_rows: int = 65536,
    canonical_answers: bool = False,
    progress: Optional[Progress] = None,
) -> CleaningStats:
    """Apply the rule to the rows of `files` (read in order) and write the result to `destination`.

    `destination` is written in place; callers pass a temporary path and rename it. Raises BadDataInput on a wrong
    schema, a corrupt or truncated file, or an empty ground truth.
    """
    readers = []
    for path in files:
        reader = open_parquet(path, f"{where} ({path})")
        check_dapo_schema(reader.schema_arrow, f"{where} ({path})")
        readers.append((path, reader))
    schema = _output_schema(readers[0][1].schema_arrow)
    for path, reader in readers[1:]:
        if not reader.schema_arrow.equals(readers[0][1].schema_arrow, check_metadata=False):
            raise BadDataInput(f"{where}: {path} has a different schema than {readers[0][0]}; give files of one schema")

    candidates_path = destination.with_name(destination.name + ".candidates")
    candidate_schema = schema.append(pa.field(PROMPT_ID_COLUMN, pa.int64()))
    seen_keys: set[bytes] = set()
    prompt_ids: dict[bytes, int] = {}
    # Per prompt id: the digest of its one reward_model so far, or None once a second distinct one showed up.
    prompt_reward: list[Optional[bytes]] = []
    rows_in = rows_distinct = rewritten_total = 0

    try:
        with pq.ParquetWriter(candidates_path, candidate_schema, compression="lz4") as candidates:
            for path, reader in readers:
                try:
                    for batch in reader.iter_batches(batch_size=batch_rows):
                        reward_index = batch.schema.get_field_index("reward_model")
                        reward_model = batch.column(reward_index)
                        if canonical_answers:
                            reward_model, rewritten = canonicalise_ground_truth(reward_model)
                            if rewritten:
                                rewritten_total += rewritten
                                columns = batch.columns
                                columns[reward_index] = reward_model
                                batch = pa.RecordBatch.from_arrays(columns, schema=batch.schema)
                        _check_ground_truth(reward_model, rows_in, f"{where} ({path})")

                        encoded_prompt = encode_rows(batch.column("prompt"))
                        encoded_reward = encode_rows(reward_model)
                        key = pc.binary_join_element_wise(
                            encode_rows(batch.column("data_source")),
                            encoded_prompt,
                            encode_rows(batch.column("ability")),
                            encoded_reward,
                            _EMPTY,
                        )
                        codes = pc.dictionary_encode(key)
                        indices = codes.indices
                        # Codes are numbered by first appearance, so a row is a first occurrence in this batch
                        # exactly when its code exceeds every code before it.
                        running_max = pc.cumulative_max(indices)
                        previous_max = pa.concat_arrays([pa.array([-1], indices.type), running_max.slice(0, len(indices) - 1)])
                        first_rows = pc.indices_nonzero(pc.greater(indices, previous_max))

                        new_rows = []
                        for code, value in enumerate(codes.dictionary.cast(pa.large_binary()).to_pylist()):
                            digest = _digest(value)
                            if digest not in seen_keys:
                                seen_keys.add(digest)
                                new_rows.append(code)
                        rows_in += len(batch)
                        if progress:
                            progress(len(batch))
                        if not new_rows:
                            continue
                        positions = first_rows.take(pa.array(new_rows, pa.int64()))
                        prompts = encoded_prompt.take(positions).cast(pa.large_binary()).to_pylist()
                        rewards = encoded_reward.take(positions).cast(pa.large_binary()).to_pylist()
                        ids = []
                        for prompt, reward in zip(prompts, rewards):
                            prompt_digest = _digest(prompt)
                            reward_digest = _digest(reward)
                            prompt_id = prompt_ids.setdefault(prompt_digest, len(prompt_ids))
                            if prompt_id == len(prompt_reward):
                                prompt_reward.append(reward_digest)
                            elif prompt_reward[prompt_id] != reward_digest:
                                prompt_reward[prompt_id] = None
                            ids.append(prompt_id)
                        rows_distinct += len(ids)
                        picked = batch.take(positions)
                        candidates.write_batch(
                            pa.RecordBatch.from_arrays(
                                [*picked.columns, pa.array(ids, pa.int64())], schema=candidate_schema
                            )
                        )
                except (pa.ArrowException, OSError) as error:
                    raise BadDataInput(
                        f"{where} ({path}): reading failed after {rows_in} rows (truncated or corrupt file?): {error}"
                    ) from None

        rows_out = _write_unconflicted(candidates_path, destination, schema, prompt_reward, batch_rows)
    finally:
        candidates_path.unlink(missing_ok=True)
    return CleaningStats(
        rows_in=rows_in,
        rows_distinct=rows_distinct,
        rows_out=rows_out,
        prompts_conflicting=sum(1 for reward in prompt_reward if reward is None),
        answers_canonicalised=rewritten_total,
    )


def _write_unconflicted(
    candidates_path: Path, destination: Path, schema: pa.Schema, prompt_reward: list, batch_rows: int
) -> int:
    rows_out = 0
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    with pq.ParquetWriter(destination, schema, compression=COMPRESSION) as writer:

        def flush() -> None:
            nonlocal pending, pending_rows
            if pending:
                writer.write_table(pa.Table.from_batches(pending, schema=schema), row_group_size=max(pending_rows, 1))
            pending, pending_rows = [], 0

        for batch in pq.ParquetFile(candidates_path).iter_batches(batch_size=batch_rows):
            ids = batch.column(PROMPT_ID_COLUMN).to_pylist()
            keep = pa.array([prompt_reward[i] is not None for i in ids], pa.bool_())
            kept = batch.filter(keep)
            kept = pa.RecordBatch.from_arrays(kept.columns[:-1], schema=schema)
            if len(kept):
                pending.append(kept)
                pending_rows += len(kept)
                rows_out += len(kept)
            if pending_rows >= batch_rows:
                flush()
        flush()
        if rows_out == 0:
            writer.write_table(schema.empty_table())
    return rows_out
