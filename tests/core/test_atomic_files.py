"""One atomic-write module: whole files appear at once, and no other module writes files its own way."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from beam_slurm.config.ray import RaySettings
from beam_slurm.core.atomic_files import (
    atomic_writer,
    publish,
    sync_directory,
    temporary_sibling,
    write_json,
    write_text,
)
from beam_slurm.core.run_store import RunStore
from beam_slurm.jobs.ray_cluster import auth

PACKAGE = Path(__file__).resolve().parents[2] / "beam_slurm"
# Renames and flushes outside atomic_files.py, each with why it is not a file write through it.
OWN_RENAMES = {
    "jobs/ray_cluster/auth.py": "the token file is created with link(), so a second writer can never replace it",
    "jobs/training/rehearsal.py": "swaps a whole checkpoint directory, not a file",
    "jobs/training/storage_probe.py": "fsyncs a scratch file to measure the storage's write bandwidth, never publishes it",
    "jobs/ray_cluster/log_copy.py": "renames inside the copy folder's descriptor (dir_fd), never a path a symlink could redirect",
}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "metrics.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_writer(target) as handle:
            handle.write("{half")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == '{"a": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_publish_moves_a_finished_temporary_into_place(tmp_path):
    final = tmp_path / "out" / "data.parquet"
    final.parent.mkdir()
    write_text(final, "old")
    temporary = temporary_sibling(final)
    assert temporary.parent == final.parent and temporary.name.startswith(".data.parquet.")
    temporary.write_bytes(b"new")
    publish(temporary, final)
    sync_directory(final.parent)
    assert final.read_bytes() == b"new" and not temporary.exists()


def test_no_other_module_writes_files_its_own_way():
    pattern = re.compile(r"os\.replace\(|os\.fsync\(|tempfile\.mkstemp\(")
    found = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if p.name != "atomic_files.py" and pattern.search(p.read_text(encoding="utf-8"))}
    assert found <= set(OWN_RENAMES), f"write through beam_slurm.core.atomic_files instead: {sorted(found - set(OWN_RENAMES))}"


@pytest.mark.parametrize("umask, expected", [(0o002, 0o664), (0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_files_on_shared_storage_follow_the_umask_and_the_token_stays_private(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        write_json(tmp_path / "report.json", {"a": 1})
        with atomic_writer(tmp_path / "plot.png", "wb") as handle:
            handle.write(b"png")
        RunStore(tmp_path / "run").write_commands(["sbatch x.sh"])
        token = auth.ensure_token(RaySettings(state_dir=str(tmp_path / "state")), "7")
    finally:
        os.umask(old)
    for path in (tmp_path / "report.json", tmp_path / "plot.png", tmp_path / "run" / "beam_run" / "commands.sh"):
        assert stat.S_IMODE(path.stat().st_mode) == expected, path
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and stat.S_IMODE(token.parent.stat().st_mode) == 0o700
