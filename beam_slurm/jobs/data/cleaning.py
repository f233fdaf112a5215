"""SkyRL's cleaning rule for DAPO-format parquet files, streamed so memory stays far below the input's size.

The rule (SkyRL examples/algorithms/dapo/data_preprocess_dapo_aime.py, written there with pandas + polars):
  1. drop exact duplicates on (data_source, prompt, ability, reward_model);
  2. drop every row whose prompt carries more than one distinct reward_model among the remaining rows.
SkyRL keeps an arbitrary row of each duplicate group in arbitrary order; we keep the first occurrence, in input order,
so the output is deterministic (the same rows as polars `unique(keep="first", maintain_order=True)`). Two passes, one
batch in memory at a time: pass 1 reads the key columns only and gives every string a small id per column (Arrow's
index_in finds known ones, so only new strings reach Python; past 64 MB a column remembers strings by a 128-bit BLAKE2b
digest, a collision ~1e-26 likely), so each row's key becomes a short code equal exactly when the keys are; first
occurrences go to a small candidates file. Pass 2 takes the kept rows by row number and writes them in input order."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from beam_slurm.core.errors import BadDataInput
from beam_slurm.jobs.data.dapo_format import KEY_COLUMNS, check_dapo_schema

Progress = Callable[[int], None]  # called with the rows just processed

PROMPT_ID_COLUMN = "__prompt_id"
ROW_COLUMN = "__row"
COMPRESSION = "zstd"


@dataclass
class CleaningStats:
    """Row counts of one cleaned file, for the manifest and the log."""

    rows_in: int  # Rows read from the source file(s)
    rows_distinct: int  # Rows left after dropping exact duplicates on the key columns
    rows_out: int  # Rows written: distinct rows whose prompt has a single reward_model
    prompts_conflicting: int  # Distinct prompts dropped because they carry more than one distinct reward_model
    answers_canonicalised: int  # Ground truths rewritten to canonical integer form before cleaning (AIME only)


def _large(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.large_string())


_NULL = _large("N")
_EMPTY = _large("")
# Distinct strings of a column kept as an Arrow array for lookups in C++; past this size, new ones are remembered
# in a Python dict by digest instead, so a column of all-distinct strings cannot make lookups quadratic.
_LOOKUP_BYTES = 64 << 20
# Strings up to this many bytes are remembered as they are in the dict; longer ones by a 128-bit digest.
_INLINE_LIMIT = 32


class StringInterner:
    """Gives every distinct string of one column a small id, so keys can be compared as short codes."""

    def __init__(self) -> None:
        self.known = pa.array([], pa.large_string())
        self.known_bytes = self.next_id = 0
        self.overflow: dict[bytes, int] = {}

    def ids(self, text: pa.Array) -> pa.Array:
        """The id of every row's string (int64), null where the string is null."""
        text = text.cast(pa.large_string())
        found = pc.index_in(text, value_set=self.known).cast(pa.int64())
        missing = pc.and_(pc.is_null(found), pc.is_valid(text))
        if not pc.any(missing).as_py():
            return found
        new = pc.dictionary_encode(text.filter(missing))
        if not self.overflow and self.known_bytes + new.dictionary.nbytes <= _LOOKUP_BYTES:
            new_ids = pa.array(range(self.next_id, self.next_id + len(new.dictionary)), pa.int64())
            self.next_id += len(new.dictionary)
            self.known = pa.concat_arrays([self.known, new.dictionary])
            self.known_bytes += new.dictionary.nbytes
        else:
            assigned = []
            for value in new.dictionary.cast(pa.large_binary()).to_pylist():
                identity = (
                    b"=" + value
                    if len(value) <= _INLINE_LIMIT
                    else b"#" + hashlib.blake2b(value, digest_size=16).digest()
                )
                if identity not in self.overflow:
                    self.overflow[identity] = self.next_id
                    self.next_id += 1
                assigned.append(self.overflow[identity])
            new_ids = pa.array(assigned, pa.int64())
        return pc.replace_with_mask(found, missing, new_ids.take(new.indices))

    def codes(self, text: pa.Array) -> pa.Array:
        """ "I<id>;" per row, "N" for nulls."""
        ids = self.ids(text).cast(pa.large_string())
        return pc.fill_null(pc.binary_join_element_wise(_large("I"), ids, _large(";"), _EMPTY), _NULL)


def encode_rows(array: pa.Array, interners: dict[str, StringInterner], path: str) -> pa.Array:
    """One short string per row, equal for two rows exactly when their values are (a prefix-free code): null -> "N";
    string -> "I<interned id>;"; number/bool -> "V<text>;"; struct -> "T" + its fields' codes; list -> "L<count>:" + its
    elements' codes. Each string column (`path`) has its own interner."""
    type_ = array.type
    if pa.types.is_null(type_):
        return pa.array(["N"] * len(array), pa.large_string())
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return interners.setdefault(path, StringInterner()).codes(array)
    if pa.types.is_struct(type_):
        parts = [
            encode_rows(child, interners, f"{path}.{field.name}")
            for child, field in zip(array.flatten(), array.type, strict=False)
        ]
        encoded = pc.binary_join_element_wise(_large("T"), *parts, _EMPTY)
        if array.null_count:
            encoded = pc.if_else(array.is_valid(), encoded, _NULL)
    elif pa.types.is_list(type_) or pa.types.is_large_list(type_):
        counts = pc.list_value_length(array).cast(pa.int64())
        inner = encode_rows(array.flatten(), interners, f"{path}[]")
        offsets = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(pc.fill_null(counts, 0))])
        joined = pc.binary_join(pa.LargeListArray.from_arrays(offsets, inner), _EMPTY)
        encoded = pc.binary_join_element_wise(_large("L"), counts.cast(pa.large_string()), _large(":"), joined, _EMPTY)
    else:
        try:
            text = array.cast(pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise BadDataInput(f"cannot compare values of type {type_} in a key column") from None
        encoded = pc.binary_join_element_wise(_large("V"), text, _large(";"), _EMPTY)
    return pc.fill_null(encoded, _NULL)


def open_parquet(path: Path, where: str) -> pq.ParquetFile:
    """Open a parquet file, turning a truncated or corrupt file into BadDataInput."""
    try:
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 22)
    except (pa.ArrowException, OSError) as error:
        raise BadDataInput(f"{where}: not a readable parquet file (truncated or corrupt?): {error}") from None


def canonicalise_ground_truth(reward_model: pa.StructArray) -> tuple[pa.StructArray, int]:
    """Rewrite integer ground truths to canonical form ("025" -> "25", "+7" -> "7"); returns (array, rewritten)."""
    truth = reward_model.flatten()[reward_model.type.get_field_index("ground_truth")]
    is_integer = pc.fill_null(pc.match_substring_regex(truth, r"^\s*[+-]?\d+\s*$"), False)
    if not pc.any(is_integer).as_py():
        return reward_model, 0
    canonical = pc.utf8_trim_whitespace(truth)
    for pattern, replacement in ((r"^\+", ""), (r"^(-?)0+(\d)", r"\1\2"), (r"^-0$", "0")):
        canonical = pc.replace_substring_regex(canonical, pattern, replacement)
    new_truth = pc.if_else(is_integer, canonical, truth)
    rewritten = pc.sum(pc.fill_null(pc.not_equal(new_truth, truth), False)).as_py() or 0
    if not rewritten:
        return reward_model, 0
    children = reward_model.flatten()
    children[reward_model.type.get_field_index("ground_truth")] = new_truth
    return pa.StructArray.from_arrays(children, fields=list(reward_model.type), mask=reward_model.is_null()), rewritten


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


def read_ahead(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Decode the next batch in a thread while the caller works on this one; reader errors reach the caller."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-read-ahead") as reader:
        pending = reader.submit(next, batches, None)
        while (batch := pending.result()) is not None:
            pending = reader.submit(next, batches, None)
            yield batch


def _kept_rows(
    candidates_path: Path, prompt_reward: list, key_schema: pa.Schema, batch_rows: int
) -> Iterator[tuple[pa.Array, pa.RecordBatch]]:
    """(global row indices, key columns) of the first occurrences whose prompt has one reward_model, in input order."""
    for batch in pq.ParquetFile(candidates_path).iter_batches(batch_size=batch_rows):
        ids = batch.column(PROMPT_ID_COLUMN).to_pylist()
        kept = batch.filter(pa.array([prompt_reward[i] is not None for i in ids], pa.bool_()))
        if len(kept):
            yield (
                kept.column(ROW_COLUMN),
                pa.RecordBatch.from_arrays([kept.column(name) for name in key_schema.names], schema=key_schema),
            )


def clean_dapo_files(
    files: list[Path],
    destination: Path,
    *,
    where: str,
    batch_rows: int = 32768,
    canonical_answers: bool = False,
    progress: Progress | None = None,
) -> CleaningStats:
    """Apply the rule to the rows of `files` and write `destination` in place (callers pass a temporary path).
    Raises BadDataInput on a wrong schema, a corrupt or truncated file, or an empty ground truth."""
    readers = []
    for path in files:
        reader = open_parquet(path, f"{where} ({path})")
        check_dapo_schema(reader.schema_arrow, f"{where} ({path})")
        readers.append((path, reader))
    input_schema = readers[0][1].schema_arrow
    for path, reader in readers[1:]:
        if not reader.schema_arrow.equals(input_schema, check_metadata=False):
            raise BadDataInput(f"{where}: {path} has a different schema than {readers[0][0]}; give files of one schema")
    # pandas metadata describes the source's index and row count, which no longer hold after cleaning.
    schema = input_schema.with_metadata(
        {k: v for k, v in (input_schema.metadata or {}).items() if k != b"pandas"} or None
    )
    key_schema = pa.schema([schema.field(name) for name in KEY_COLUMNS])
    candidate_schema = key_schema.append(pa.field(ROW_COLUMN, pa.int64())).append(
        pa.field(PROMPT_ID_COLUMN, pa.int64())
    )

    candidates_path = destination.with_name(destination.name + ".candidates")
    interners: dict[str, StringInterner] = {}
    seen_keys: set[bytes] = set()
    prompt_ids: dict[bytes, int] = {}
    # Per prompt id: the code of its one reward_model so far, or None once a second distinct one showed up.
    prompt_reward: list[bytes | None] = []
    rows_in = rows_distinct = rewritten_total = 0

    try:
        # Pass 1, key columns only: find first occurrences, track reward_models per prompt.
        with pq.ParquetWriter(candidates_path, candidate_schema, compression="lz4") as candidates:
            for path, reader in readers:
                with _read_errors(where, path, lambda: rows_in):  # noqa: B023 (read late on purpose: the rows so far)
                    for batch in read_ahead(reader.iter_batches(batch_size=batch_rows, columns=list(KEY_COLUMNS))):
                        reward_model = batch.column("reward_model")
                        if canonical_answers:
                            reward_model, rewritten = canonicalise_ground_truth(reward_model)
                            if rewritten:
                                rewritten_total += rewritten
                                columns = batch.columns
                                columns[batch.schema.get_field_index("reward_model")] = reward_model
                                batch = pa.RecordBatch.from_arrays(columns, schema=batch.schema)
                        _check_ground_truth(reward_model, rows_in, f"{where} ({path})")

                        encoded_prompt = encode_rows(batch.column("prompt"), interners, "prompt")
                        encoded_reward = encode_rows(reward_model, interners, "reward_model")
                        key = pc.binary_join_element_wise(
                            encode_rows(batch.column("data_source"), interners, "data_source"),
                            encoded_prompt,
                            encode_rows(batch.column("ability"), interners, "ability"),
                            encoded_reward,
                            _EMPTY,
                        )
                        codes = pc.dictionary_encode(key)
                        indices = codes.indices
                        # Codes number by first appearance: a first occurrence has a code above all before it.
                        running_max = pc.cumulative_max(indices)
                        previous_max = pa.concat_arrays(
                            [pa.array([-1], indices.type), running_max.slice(0, len(indices) - 1)]
                        )
                        first_rows = pc.indices_nonzero(pc.greater(indices, previous_max))
                        values = codes.dictionary.cast(pa.large_binary()).to_pylist()
                        new_codes = [code for code, value in enumerate(values) if value not in seen_keys]
                        seen_keys.update(values)
                        if new_codes:
                            positions = first_rows.take(pa.array(new_codes, pa.int64()))
                            prompts = encoded_prompt.take(positions).cast(pa.large_binary()).to_pylist()
                            rewards = encoded_reward.take(positions).cast(pa.large_binary()).to_pylist()
                            ids = []
                            for prompt, reward in zip(prompts, rewards, strict=False):
                                prompt_id = prompt_ids.setdefault(prompt, len(prompt_ids))
                                if prompt_id == len(prompt_reward):
                                    prompt_reward.append(reward)
                                elif prompt_reward[prompt_id] != reward:
                                    prompt_reward[prompt_id] = None
                                ids.append(prompt_id)
                            rows_distinct += len(ids)
                            picked = batch.take(positions)
                            global_rows = pc.add(positions.cast(pa.int64()), pa.scalar(rows_in, pa.int64()))
                            candidates.write_batch(
                                pa.RecordBatch.from_arrays(
                                    [*picked.columns, global_rows, pa.array(ids, pa.int64())], schema=candidate_schema
                                )
                            )
                        rows_in += len(batch)
                        if progress:
                            progress(len(batch))

        # Pass 2: join the kept rows' other columns (extra_info) back on, in input order.
        rows_out = _write_kept(
            readers, where, candidates_path, destination, schema, key_schema, prompt_reward, batch_rows
        )
    finally:
        candidates_path.unlink(missing_ok=True)
    return CleaningStats(
        rows_in=rows_in,
        rows_distinct=rows_distinct,
        rows_out=rows_out,
        prompts_conflicting=sum(1 for reward in prompt_reward if reward is None),
        answers_canonicalised=rewritten_total,
    )


@contextmanager
def _read_errors(where: str, path: Path, rows_read: Callable[[], int]) -> Iterator[None]:
    try:
        yield
    except (pa.ArrowException, OSError) as error:
        raise BadDataInput(
            f"{where} ({path}): reading failed after {rows_read()} rows (truncated or corrupt file?): {error}"
        ) from None


def _write_kept(
    readers: list,
    where: str,
    candidates_path: Path,
    destination: Path,
    schema: pa.Schema,
    key_schema: pa.Schema,
    prompt_reward: list,
    batch_rows: int,
) -> int:
    other_columns = [name for name in schema.names if name not in KEY_COLUMNS]
    kept = _kept_rows(candidates_path, prompt_reward, key_schema, batch_rows)
    rows_out = 0
    with pq.ParquetWriter(destination, schema, compression=COMPRESSION) as writer:
        if not other_columns:
            for _, key_batch in kept:
                writer.write_batch(
                    pa.RecordBatch.from_arrays([key_batch.column(n) for n in schema.names], schema=schema)
                )
                rows_out += len(key_batch)
        else:
            pending_rows, pending_keys = next(kept, (None, None))
            offset = 0
            for path, reader in readers:
                with _read_errors(where, path, lambda: offset):  # noqa: B023 (read late on purpose: the row reached)
                    for batch in reader.iter_batches(batch_size=batch_rows, columns=other_columns):
                        end = offset + len(batch)
                        while pending_rows is not None and len(pending_rows) and pending_rows[0].as_py() < end:
                            assert pending_keys is not None  # comes and goes with pending_rows
                            # The kept rows of this input batch: the prefix of the pending ones below `end`.
                            inside = pc.sum(pc.less(pending_rows, end)).as_py()
                            local = pc.subtract(pending_rows.slice(0, inside), pa.scalar(offset, pa.int64()))
                            others = batch.take(local)
                            keys = pending_keys.slice(0, inside)
                            writer.write_batch(
                                pa.RecordBatch.from_arrays(
                                    [(keys if n in KEY_COLUMNS else others).column(n) for n in schema.names],
                                    schema=schema,
                                )
                            )
                            rows_out += inside
                            pending_rows, pending_keys = pending_rows.slice(inside), pending_keys.slice(inside)
                            if not len(pending_rows):
                                pending_rows, pending_keys = next(kept, (None, None))
                        offset = end
        if rows_out == 0:
            writer.write_table(schema.empty_table())
    return rows_out
