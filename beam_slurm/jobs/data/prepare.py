"""Build the three cleaned parquet files and their manifest (what `beam-slurm prepare-data` runs, in a job or on the
login node); every output checked against its sources' hashes before it is rebuilt."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from beam_slurm.config.data import DataConfig
from beam_slurm.core.atomic_files import publish, sync_directory, temporary_sibling
from beam_slurm.core.errors import BadDataInput
from beam_slurm.core.shared_lock import SharedFileLock
from beam_slurm.jobs.data.aime import convert_aime_files
from beam_slurm.jobs.data.cleaning import COMPRESSION, CleaningStats, clean_dapo_files, open_parquet
from beam_slurm.jobs.data.dapo_format import check_dapo_schema
from beam_slurm.jobs.data.manifest import load_manifest, reuse_verdict, sha256_file, write_manifest
from beam_slurm.jobs.data.sources import HUB_SCHEME, ResolvedSource, resolve_source

logger = logging.getLogger(__name__)
DAPO_MATH_OUTPUT = "dapo-math-17k-cleaned.parquet"
AIME2024_OUTPUT = "aime-2024-cleaned.parquet"
AIME2025_OUTPUT = "aime-2025-cleaned.parquet"
LOCK_NAME = ".prepare-data.shared-lock"  # not the flock era's .prepare-data.lock: an empty file would look held
# The out_dir is on shared storage where flock may be node-local: a link()-based lock with a heartbeat instead. A try
# sees a live preparation within a heartbeat and refuses; a killed one's lock is taken over after LOCK_STALE_AFTER_S.
LOCK_STALE_AFTER_S = 30.0
LOCK_HEARTBEAT_S = 5.0


@dataclass
class OutputPlan:
    """One output file: where its rows come from and the settings that shape it."""

    file_name: str  # Output file inside out_dir
    setting: str  # The source setting, e.g. data.dapo_math
    source: Any  # The source value(s) as given
    settings: dict  # Other settings that change this output's bytes (recorded in the manifest)


def plans(config: DataConfig) -> list[OutputPlan]:
    return [
        OutputPlan(DAPO_MATH_OUTPUT, "data.dapo_math", config.dapo_math, {}),
        OutputPlan(
            AIME2024_OUTPUT, "data.aime2024", config.aime2024, {"canonical_aime_answers": config.canonical_aime_answers}
        ),
        OutputPlan(
            AIME2025_OUTPUT,
            "data.aime2025",
            config.aime2025_sources(),
            {"aime2025_data_source": config.aime2025_data_source},
        ),
    ]


def _specs(plan: OutputPlan) -> list[str]:
    return plan.source if isinstance(plan.source, list) else [plan.source]


def _file_records(sources: list[ResolvedSource]) -> list[dict]:
    return [{"path": str(path.resolve()), "sha256": sha256_file(path)} for s in sources for path in s.files]


def reuse_request(plan: OutputPlan) -> dict:
    """What an output's manifest entry must match for it to be kept; BadDataInput when a local source moved."""
    request: dict = {"source": plan.source, "settings": plan.settings}
    if not any(spec.startswith(HUB_SCHEME) for spec in _specs(plan)):
        request["source_files"] = _file_records([resolve_source(spec, plan.setting) for spec in _specs(plan)])
    return request


class RowProgress:
    """A rich progress bar on an interactive stderr; a log line every 10 % otherwise (Slurm logs)."""

    def __init__(self, label: str, total: int):
        self.label, self.total = label, max(total, 1)
        self.done, self.next_report, self.started = 0, 0.1, time.monotonic()
        self.bar = None
        if sys.stderr.isatty():
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self.task = self.bar.add_task(label, total=total)
            self.bar.start()

    def __call__(self, rows: int) -> None:
        self.done += rows
        if self.bar is not None:
            self.bar.update(self.task, advance=rows)
        elif self.done / self.total >= self.next_report:
            logger.info(f"{self.label}: {self.done}/{self.total} rows ({time.monotonic() - self.started:.1f} s)")
            self.next_report = (int(self.done / self.total * 10) + 1) / 10

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def exclusive_lock(out_dir: Path) -> SharedFileLock:
    """The lock one preparation of out_dir holds (the manifest's read-modify-write and the outputs' rebuild)."""
    return SharedFileLock(
        out_dir / LOCK_NAME,
        stale_after=LOCK_STALE_AFTER_S,
        heartbeat=LOCK_HEARTBEAT_S,
        poll_interval=0.5,
        log=logger.info,
    )


@contextmanager
def _exclusive(out_dir: Path) -> Iterator[SharedFileLock]:
    lock = exclusive_lock(out_dir)
    if not lock.try_acquire():
        raise BadDataInput(f"data.out_dir={out_dir}: another prepare-data is writing there; wait for it")
    try:
        yield lock
    finally:
        lock.release()


def _prepare_out_dir(config: DataConfig, data_dir: str | None) -> Path:
    out_dir = Path(config.resolved_out_dir(data_dir)).expanduser()
    if out_dir.exists() and not out_dir.is_dir():
        raise BadDataInput(f"data.out_dir={out_dir} exists and is not a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BadDataInput(f"data.out_dir={out_dir}: cannot create it ({error.strerror})") from None
    if not os.access(out_dir, os.W_OK):
        raise BadDataInput(f"data.out_dir={out_dir} is not writable")
    return out_dir.resolve()


def _build(plan: OutputPlan, sources: list[ResolvedSource], config: DataConfig, temporary: Path) -> CleaningStats:
    files = [path for source in sources for path in source.files]
    if plan.file_name == AIME2025_OUTPUT:
        table = convert_aime_files(files, plan.setting, config.aime2025_data_source)
        converted = temporary.with_name(temporary.name + ".converted")
        try:
            pq.write_table(table, converted, compression=COMPRESSION)
            return clean_dapo_files([converted], temporary, where=plan.setting, batch_rows=config.batch_rows)
        finally:
            converted.unlink(missing_ok=True)
    progress = RowProgress(
        plan.file_name,
        sum(open_parquet(p, plan.setting).metadata.num_rows for p in files if p.suffix == ".parquet"),
    )
    try:
        return clean_dapo_files(
            files,
            temporary,
            where=plan.setting,
            batch_rows=config.batch_rows,
            canonical_answers=plan.file_name == AIME2024_OUTPUT and config.canonical_aime_answers,
            progress=progress,
        )
    finally:
        progress.close()


def _adopted_entry(plan: OutputPlan, output: Path, request: dict) -> dict:
    """The manifest entry of a cleaned file found in place, once its schema and rows check out."""
    where = f"{output} (--adopt)"
    parquet = open_parquet(output, where)
    if plan.file_name != AIME2025_OUTPUT:
        check_dapo_schema(parquet.schema_arrow, where)
    rows = parquet.metadata.num_rows
    if rows < 1 or (plan.file_name != DAPO_MATH_OUTPUT and rows != 30):
        raise BadDataInput(
            f"{where}: {rows} rows; {'an AIME year has 30' if rows else 'it is empty'}: rebuild it with --force"
        )
    logger.info(f"{plan.file_name}: adopted ({rows} rows, schema checked; recorded in the manifest)")
    return {
        **request,
        "adopted": True,
        "rows_out": rows,
        "sha256": sha256_file(output),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def prepare(config: DataConfig, *, force: bool = False, data_dir: str | None = None, adopt: bool = False) -> dict:
    """Write the outputs that are missing or stale into out_dir (renamed into place only when all succeeded) and
    return the manifest entries; `adopt` records cleaned files found without an entry once they check out."""
    problems = config.problems()
    if problems:
        raise BadDataInput("; ".join(problems))
    out_dir = _prepare_out_dir(config, data_dir)
    with _exclusive(out_dir) as lock:
        manifest = load_manifest(out_dir)
        to_build: list[OutputPlan] = []
        adopted: dict[str, dict] = {}
        for plan in plans(config):
            output = out_dir / plan.file_name
            if not output.exists() or force:
                to_build.append(plan)
                continue
            request = reuse_request(plan)
            reason = reuse_verdict(output, manifest.get(plan.file_name), request)
            if reason is None:
                logger.info(f"{plan.file_name}: kept (up to date with {plan.setting})")
            elif adopt and manifest.get(plan.file_name) is None:
                adopted[plan.file_name] = _adopted_entry(plan, output, request)
            else:
                raise BadDataInput(
                    f"{output} already exists and {reason}; pass --force to replace it or choose another data.out_dir"
                )

        resolved: dict[str, list[ResolvedSource]] = {}
        for plan in to_build:
            sources = [resolve_source(spec, plan.setting, config.hub_retries) for spec in _specs(plan)]
            resolved[plan.file_name] = sources
            for path in [p for s in sources for p in s.files] if plan.file_name != AIME2025_OUTPUT else []:
                where = f"{plan.setting} ({path})"
                if path.suffix != ".parquet":
                    raise BadDataInput(
                        f"{plan.setting}: {path} is not a .parquet file (DAPO-format sources are parquet)"
                    )
                check_dapo_schema(open_parquet(path, where).schema_arrow, where)

        temporaries = {plan.file_name: temporary_sibling(out_dir / plan.file_name) for plan in to_build}
        try:
            entries = {}
            for plan in to_build:
                started, sources = time.monotonic(), resolved[plan.file_name]
                stats = _build(plan, sources, config, temporaries[plan.file_name])
                logger.info(
                    f"{plan.file_name}: {stats.rows_in} rows -> {stats.rows_distinct} distinct -> {stats.rows_out} "
                    f"kept ({stats.prompts_conflicting} prompts with conflicting answers dropped) "
                    f"in {time.monotonic() - started:.1f} s"
                )
                if plan.file_name != DAPO_MATH_OUTPUT and stats.rows_out != 30:
                    logger.warning(f"warning: {plan.file_name} has {stats.rows_out} problems; an AIME year has 30")
                entries[plan.file_name] = {
                    "source": plan.source,
                    "settings": plan.settings,
                    "source_files": _file_records(sources),
                    "revisions": [s.revision for s in sources],
                    **asdict(stats),
                    "sha256": sha256_file(temporaries[plan.file_name]),
                    "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                }
            if not lock.still_held():  # stalled past the lock's lifetime: another preparation may be writing
                raise BadDataInput(f"data.out_dir={out_dir}: another prepare-data took the lock over; run it again")
            for plan in to_build:
                publish(temporaries[plan.file_name], out_dir / plan.file_name)
            manifest.update({**entries, **adopted})
            write_manifest(out_dir, manifest)
            sync_directory(out_dir)
        finally:
            for temporary in temporaries.values():
                temporary.unlink(missing_ok=True)
    return manifest
