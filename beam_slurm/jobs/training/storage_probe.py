"""The checkpoint storage's write bandwidth, measured by the preflight on every node at once: each node writes and
fsyncs a probe file in `<ckpt_dir>/.beam/` until 1 GiB is durable or cluster.storage_probe_s has passed. All nodes write
together, as when a checkpoint is saved, so the figure is each node's share under that load; the batch shell checks the
slowest against the notice budget."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from beam_slurm.core.atomic_files import read_json
from beam_slurm.policy.notice_budget import GB, save_seconds

logger = logging.getLogger(__name__)
PROBE_BYTES = 1024**3  # written and fsynced, then stop
_CHUNK = 64 * 1024 * 1024  # bytes per fsync
_BLOCK = 16 * 1024 * 1024  # random bytes written over and over: a 64 MiB urandom costs 0.25 CPU-s on every node
_MIN_CHUNK = 1024 * 1024
RESULT_FILE = "storage_write.json"  # in the attempt's log folder


def _next_chunk(written: int, elapsed: float, max_seconds: float, max_bytes: int) -> int:
    """Bytes to write before the next fsync: a full chunk, or what the rate so far fits into the time left, so the
    probe ends near max_seconds however slow the storage is under all nodes' load (a 64 MiB chunk at 30 MB/s is 2 s
    over the bound)."""
    left = max_bytes - written
    if written == 0 or elapsed <= 0:
        return min(_BLOCK, left)  # the first chunk measures the rate
    fits = int(written / elapsed * (max_seconds - elapsed))
    return min(_CHUNK, left, max(fits, _MIN_CHUNK))


def measure_write(folder: Path, max_seconds: float, max_bytes: int = PROBE_BYTES) -> dict:
    """Write and fsync chunks into a probe file under `folder` (created) until max_bytes or max_seconds; the file is
    removed. Returns {"bytes", "seconds", "gbytes_per_s"} (decimal GB, as `cluster.storage_write_gbytes_per_s`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"write-probe-{os.uname().nodename}-{os.getpid()}"
    block = memoryview(os.urandom(min(_BLOCK, max_bytes)))
    written = 0
    started = time.monotonic()
    try:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb", buffering=0) as handle:
            while written < max_bytes and (elapsed := time.monotonic() - started) < max_seconds:
                chunk = _next_chunk(written, elapsed, max_seconds, max_bytes)
                done = 0
                while done < chunk:
                    done += handle.write(block[: min(len(block), chunk - done)])
                os.fsync(handle.fileno())  # durable bytes only: a page cache absorbs a burst, a 0.9 TB checkpoint not
                written += done
        seconds = time.monotonic() - started
    finally:
        path.unlink(missing_ok=True)
    return {
        "bytes": written,
        "seconds": round(seconds, 3),
        "gbytes_per_s": round(written / seconds / 1e9, 3) if seconds > 0 else 0.0,
    }


def probe_record(ckpt_dir: str, max_seconds: float) -> dict:
    """What a node adds to its preflight result line: {"write": measure} or {"write_error": reason}."""
    try:
        return {"write": measure_write(Path(ckpt_dir) / ".beam", max_seconds=max_seconds)}
    except OSError as exc:
        return {"write_error": f"write probe in {ckpt_dir} failed: {exc.strerror or exc}"}


def gather(records: dict[str, dict], attempt_dir: Path) -> dict[str, float]:
    """Write the nodes' measures to storage_write.json in the attempt folder; host -> GB/s of those that measured."""
    (Path(attempt_dir) / RESULT_FILE).write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    return {host: r["write"]["gbytes_per_s"] for host, r in records.items() if "write" in r}


def slowest_recorded(attempt_dir: Path) -> float | None:
    """The slowest node's GB/s in the attempt's storage_write.json, or None when nothing was measured."""
    records = read_json(Path(attempt_dir) / RESULT_FILE) or {}
    rates = [r["write"]["gbytes_per_s"] for r in records.values() if isinstance(r, dict) and "write" in r]
    return min(rates) if rates else None


def check_budget(rates: dict[str, float], save_bytes_per_node: int, save_window_s: float) -> bool:
    """Log the slowest node's bandwidth, warning when a save at that speed breaks the notice budget; True if it fits."""
    if not rates:
        return True
    host = min(rates, key=rates.__getitem__)
    slowest = rates[host]
    logger.info(
        f"storage writes {slowest:.2f} GB/s per node at the slowest ({host}), "
        f"{max(rates.values()):.2f} at the fastest, all {len(rates)} nodes writing at once"
    )
    if save_bytes_per_node <= 0 or (save_s := save_seconds(save_bytes_per_node, slowest)) <= save_window_s:
        return True
    need = save_bytes_per_node / max(save_window_s, 1e-9) / GB if save_window_s > 0 else float("inf")
    logger.warning(
        f"warning: at {slowest:.2f} GB/s a checkpoint of {save_bytes_per_node / GB:,.1f} GB per node takes "
        f"{save_s:,.0f} s, more than the {max(save_window_s, 0):,.0f} s a notice leaves for it: a save on notice "
        f"will be cut off. Raise cluster.signal_before_s and cluster.grace_s (see `beam-slurm plan`), use storage "
        f"faster than {need:.1f} GB/s per node, or lower checkpoint.interval"
    )
    return False


def records_from_output(output: str, prefix: str) -> dict[str, dict]:
    """host -> its write measure (or error) from the preflight step's result lines."""
    records = (json.loads(line[len(prefix) :]) for line in output.splitlines() if line.startswith(prefix))
    found = {record["host"]: {k: v for k, v in record.items() if k in ("write", "write_error")} for record in records}
    return {host: r for host, r in found.items() if r}
