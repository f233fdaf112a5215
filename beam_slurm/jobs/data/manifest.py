"""The manifest beside the cleaned files (`prepare-data-manifest.json`: per output its sources, their hashes and
revision, its settings, row counts and hash); an output is reused only when its entry matches and its bytes still hash
to the recorded value."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from beam_slurm.core.atomic_files import read_json, write_text

MANIFEST_NAME = "prepare-data-manifest.json"
MANIFEST_VERSION = 1


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(4 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def load_manifest(out_dir: Path) -> dict:
    """The manifest's entries by output file name; empty when there is none or it cannot be read."""
    data = read_json(out_dir / MANIFEST_NAME)
    outputs = data.get("outputs") if isinstance(data, dict) else None
    return outputs if isinstance(outputs, dict) else {}


def write_manifest(out_dir: Path, outputs: dict) -> None:
    """Write the manifest atomically."""
    write_text(
        out_dir / MANIFEST_NAME,
        json.dumps({"version": MANIFEST_VERSION, "outputs": outputs}, indent=2, sort_keys=True) + "\n",
    )


def reuse_verdict(output: Path, entry: dict | None, request: dict) -> str | None:
    """None when `output` can be kept for `request` (source, settings, local source_files); else why not."""
    if entry is None:
        return "is not recorded in the manifest (it was not written by prepare-data, or the manifest is gone)"
    if entry.get("source") != request["source"]:
        return f"was made from {entry.get('source')!r}, not {request['source']!r}"
    if entry.get("settings") != request["settings"]:
        return f"was made with other settings ({entry.get('settings')})"
    if "source_files" in request and entry.get("source_files") != request["source_files"]:
        return "was made from different source file contents (sha256 changed)"
    if entry.get("sha256") != sha256_file(output):
        return "has changed since it was written (sha256 differs from the manifest)"
    return None
