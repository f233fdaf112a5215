"""Source files: a local path, or a file (or every data file) of a Hugging Face dataset repository.

    hf://datasets/<owner>/<name>[@<revision>][/<path-in-repo>]   (huggingface_hub's own `hf://` form)

Without `<path-in-repo>` every parquet file is taken (else every jsonl), in name order. Downloads go through
huggingface_hub's cache, resume, retry, honour HF_HUB_OFFLINE=1 and use HF_TOKEN, which is never printed."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from beam_slurm.core.errors import BadDataInput

logger = logging.getLogger(__name__)

# huggingface_hub is imported inside the functions that use it: only a hub source needs it, and it is slow to import.

HUB_SCHEME = "hf://"
DATA_FILE_SUFFIXES = (".parquet", ".jsonl", ".json")


@dataclass(frozen=True)
class HubAddress:
    """A parsed `hf://datasets/...` address."""

    repo_id: str  # `<owner>/<name>` of the dataset repository
    revision: str | None  # Branch, tag or commit; None = the default branch
    path_in_repo: str | None  # File inside the repository; None = every data file


@dataclass
class ResolvedSource:
    """Local files for one configured source, and where they came from (for the manifest)."""

    setting: str  # The setting that named the source, e.g. `data.dapo_math`
    spec: str  # The value as the user gave it
    files: list[Path] = field(default_factory=list)  # Local files to read, in order
    revision: str | None = None  # Commit the hub files were resolved to; None for local files


def parse_hub_address(spec: str, setting: str) -> HubAddress:
    """Parse `hf://datasets/<owner>/<name>[@<revision>][/<path>]`; raises BadDataInput naming the setting."""
    rest = spec[len(HUB_SCHEME) :]
    if rest.startswith("datasets/"):
        rest = rest[len("datasets/") :]
    elif rest.split("/", 1)[0] in ("models", "spaces"):
        raise BadDataInput(f"{setting}={spec}: only dataset repositories are supported (hf://datasets/...)")
    parts = rest.split("/", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise BadDataInput(f"{setting}={spec}: expected hf://datasets/<owner>/<name>[@<revision>][/<path-in-repo>]")
    name, at, revision = parts[1].partition("@")
    path_in_repo = parts[2].strip("/") if len(parts) == 3 and parts[2].strip("/") else None
    if not name or (at and not revision):
        raise BadDataInput(f"{setting}={spec}: empty repository name or revision")
    return HubAddress(f"{parts[0]}/{name}", unquote(revision) if revision else None, path_in_repo)


def _local_files(spec: str, setting: str) -> list[Path]:
    path = Path(spec).expanduser()
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in DATA_FILE_SUFFIXES)
        files = [p for p in found if p.suffix == ".parquet"] or found
        if not files:
            raise BadDataInput(f"{setting}={spec}: the directory holds no .parquet/.jsonl/.json file")
        return files
    if not path.is_file():
        raise BadDataInput(f"{setting}={spec}: no such file (give a local path or hf://datasets/<owner>/<name>/<file>)")
    return [path]


def _commit_of_cached_path(path: Path) -> str | None:
    # The hub cache lays files out as .../snapshots/<commit>/<path-in-repo>.
    parts = path.parts
    index = len(parts) - 1 - parts[::-1].index("snapshots") if "snapshots" in parts else len(parts)
    return parts[index + 1] if index + 1 < len(parts) else None


def _is_permanent_hub_error(error: Exception) -> bool:
    from huggingface_hub import errors as hub_errors

    permanent = (
        hub_errors.RepositoryNotFoundError,
        hub_errors.RevisionNotFoundError,
        hub_errors.EntryNotFoundError,
        hub_errors.GatedRepoError,
        hub_errors.LocalEntryNotFoundError,
        hub_errors.OfflineModeIsEnabled,
    )
    if isinstance(error, permanent):
        return True
    status = getattr(getattr(error, "response", None), "status_code", None)
    # 4xx other than rate limiting will not change on retry.
    return status is not None and 400 <= status < 500 and status != 429


def _with_retries(action, what: str, setting: str, spec: str, attempts: int):
    delay = 1.0
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - classified below; hub and network errors vary by version
            if _is_permanent_hub_error(error) or attempt == attempts:
                raise BadDataInput(_hub_failure_message(error, what, setting, spec, attempt)) from None
            logger.info(
                f"{setting}: {what} failed ({type(error).__name__}); retry {attempt}/{attempts - 1} in {delay:.0f} s"
            )
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    raise AssertionError("unreachable")


def _hub_failure_message(error: Exception, what: str, setting: str, spec: str, attempts: int) -> str:
    from huggingface_hub import constants
    from huggingface_hub import errors as hub_errors

    if constants.HF_HUB_OFFLINE or isinstance(
        error, (hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled)
    ):
        return (
            f"{setting}={spec}: not in the local hub cache ({constants.HF_HUB_CACHE}) and the hub is not reachable "
            f"(HF_HUB_OFFLINE={'1' if constants.HF_HUB_OFFLINE else '0'}). Download it where the hub is reachable "
            f"with the same HF_HOME, or pass a local file: {setting}=/path/to/file"
        )
    for kind, text in (
        (hub_errors.GatedRepoError, "the repository is gated; accept its terms on the hub and export HF_TOKEN"),
        (hub_errors.RepositoryNotFoundError, "repository not found (or private: export HF_TOKEN)"),
        (hub_errors.RevisionNotFoundError, "revision not found in the repository"),
        (hub_errors.EntryNotFoundError, "file not found in the repository"),
    ):
        if isinstance(error, kind):
            return f"{setting}={spec}: {text}"
    # Only the class name and the library's message: neither carries the token.
    return f"{setting}={spec}: {what} failed after {attempts} attempt(s): {type(error).__name__}: {error}"


def _resolve_hub(spec: str, setting: str, attempts: int) -> ResolvedSource:
    from huggingface_hub import hf_hub_download, snapshot_download

    address = parse_hub_address(spec, setting)
    download = functools.partial(_with_retries, what="download", setting=setting, spec=spec, attempts=attempts)
    if address.path_in_repo:
        path = Path(
            download(
                lambda: hf_hub_download(
                    address.repo_id, address.path_in_repo, repo_type="dataset", revision=address.revision
                )
            )
        )
        return ResolvedSource(setting, spec, [path], _commit_of_cached_path(path) or address.revision)
    snapshot = Path(
        download(
            lambda: snapshot_download(
                address.repo_id, repo_type="dataset", revision=address.revision, allow_patterns=["*.parquet", "*.jsonl"]
            )
        )
    )
    found = sorted(p for p in snapshot.rglob("*") if p.is_file() and p.suffix in (".parquet", ".jsonl"))
    files = [p for p in found if p.suffix == ".parquet"] or found
    if not files:
        raise BadDataInput(
            f"{setting}={spec}: the repository has no .parquet or .jsonl file; name one after the revision"
        )
    return ResolvedSource(setting, spec, files, _commit_of_cached_path(snapshot / "x") or address.revision)


def resolve_source(spec: str, setting: str, hub_retries: int = 5) -> ResolvedSource:
    """Turn one configured source into local files, downloading hub files into the cache when needed."""
    if spec.startswith(HUB_SCHEME):
        return _resolve_hub(spec, setting, hub_retries)
    return ResolvedSource(setting, spec, _local_files(spec, setting), None)
