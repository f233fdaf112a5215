"""`beam-slurm prepare-data`: outputs, manifest, reuse, bad input (exit 2, out_dir untouched), hub sources offline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dapo_inputs import (
    AIME2025_ANSWERS,
    aime2024_rows,
    random_rows,
    reference_clean,
    tricky_rows,
    write_aime2025_opencompass,
    write_aime2025_yentinglin,
    write_dapo,
)

from beam_slurm.core.errors import BadDataInput
from beam_slurm.jobs.data.manifest import MANIFEST_NAME, sha256_file
from beam_slurm.jobs.data.sources import parse_hub_address
from beam_slurm.verbs.prepare_data import main

REPO = Path(__file__).resolve().parents[3]
BEAM_SLURM = Path(sys.executable).with_name("beam-slurm")
OUTPUTS = ["dapo-math-17k-cleaned.parquet", "aime-2024-cleaned.parquet", "aime-2025-cleaned.parquet"]


@pytest.fixture
def sources(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    return {
        "dapo_math": write_dapo(src / "dapo-math-17k.parquet", tricky_rows() + random_rows(5, 500), row_group_size=128),
        "aime2024": write_dapo(src / "aime-2024.parquet", aime2024_rows()),
        "aime2025": write_aime2025_yentinglin(src / "aime2025.parquet"),
    }


def args(sources: dict, out_dir: Path, **extra) -> list[str]:
    values = {**sources, "out_dir": out_dir, **extra}
    return [f"data.{key}={value}" for key, value in values.items()]


def listing(directory: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(directory.iterdir()) if p.is_file()}


def outputs_and_manifest(directory: Path) -> tuple[dict, dict]:
    """The outputs' hashes and the manifest without its write times (a rebuild a second later is the same)."""
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    for entry in manifest["outputs"].values():
        entry.pop("written_at")
    return {name: sha256_file(directory / name) for name in OUTPUTS}, manifest


def test_exact_command_writes_three_outputs_and_manifest(tmp_path, sources):
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(BEAM_SLURM), "prepare-data", *args(sources, out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUTS, MANIFEST_NAME])  # the lock is gone once released

    dapo = pl.read_parquet(out / OUTPUTS[0])
    assert dapo.to_dicts() == reference_clean(pl.read_parquet(sources["dapo_math"])).to_dicts()
    aime2024 = pl.read_parquet(out / OUTPUTS[1])
    assert aime2024.height == 30 and aime2024.to_dicts() == reference_clean(pl.read_parquet(sources["aime2024"])).to_dicts()
    aime2025 = pq.read_table(out / OUTPUTS[2]).to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in aime2025] == [str(a) for a in AIME2025_ANSWERS]
    # The three files share one schema, so they can be fed to the trainer side by side.
    assert pq.read_schema(out / OUTPUTS[2]).equals(pq.read_schema(out / OUTPUTS[1]), check_metadata=False)

    manifest = json.loads((out / MANIFEST_NAME).read_text())["outputs"]
    for name, setting in zip(OUTPUTS, ["dapo_math", "aime2024", "aime2025"]):
        entry = manifest[name]
        assert entry["sha256"] == sha256_file(out / name)
        assert entry["source_files"] == [{"path": str(sources[setting].resolve()), "sha256": sha256_file(sources[setting])}]
        assert entry["rows_out"] == pq.ParquetFile(out / name).metadata.num_rows
    assert manifest[OUTPUTS[0]]["rows_in"] == 523 and manifest[OUTPUTS[1]]["rows_in"] == 960
    assert manifest[OUTPUTS[2]]["source"] == [str(sources["aime2025"])]
    assert manifest[OUTPUTS[1]]["revisions"] == [None]


def test_rerun_keeps_good_outputs_and_refuses_changed_ones(tmp_path, sources, capsys):
    out = tmp_path / "out"
    assert main(args(sources, out)) == 0
    outputs_and_manifest_before = outputs_and_manifest(out)
    mtimes = {name: (out / name).stat().st_mtime_ns for name in OUTPUTS}
    capsys.readouterr()
    assert main(args(sources, out)) == 0
    assert "kept" in capsys.readouterr().err
    assert {name: (out / name).stat().st_mtime_ns for name in OUTPUTS} == mtimes

    # An output edited by hand is never clobbered silently.
    with open(out / OUTPUTS[1], "ab") as handle:
        handle.write(b"edited")
    assert main(args(sources, out)) == 2
    err = capsys.readouterr().err
    assert "has changed since it was written" in err and "pass --force" in err
    assert main([*args(sources, out), "--force"]) == 0
    assert outputs_and_manifest(out) == outputs_and_manifest_before
    # The old spelling is refused (exit 2, nothing changed) and names the flag to use.
    assert main(args(sources, out, overwrite="true")) == 2
    assert "data.overwrite is an old spelling, not accepted; use --force instead of data.overwrite=true" in \
        capsys.readouterr().err
    assert outputs_and_manifest(out) == outputs_and_manifest_before

    # A changed source makes the old output stale: refuse without overwrite.
    write_dapo(sources["aime2024"], aime2024_rows()[:100])
    assert main(args(sources, out)) == 2
    assert "different source file contents" in capsys.readouterr().err


def test_foreign_file_in_out_dir_is_not_replaced(tmp_path, sources, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / OUTPUTS[0]).write_text("mine")
    assert main(args(sources, out)) == 2
    err = capsys.readouterr().err
    assert "not recorded in the manifest" in err and "pass --force" in err
    assert (out / OUTPUTS[0]).read_text() == "mine"


def test_out_dir_defaults_to_data_dir(tmp_path, sources, monkeypatch, capsys):
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "from-env"))
    assert main([f"data.{k}={v}" for k, v in sources.items()]) == 0
    assert all((tmp_path / "from-env" / name).exists() for name in OUTPUTS)
    monkeypatch.delenv("DATA_DIR")
    assert main([f"data.{k}={v}" for k, v in sources.items()]) == 2
    assert "data.out_dir is not set" in capsys.readouterr().err


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])


def _drop_ability(path: Path) -> None:
    pq.write_table(pq.read_table(path).drop_columns(["ability"]), path)


def _integer_ground_truth(path: Path) -> None:
    table = pq.read_table(path)
    reward = pa.StructArray.from_arrays([pa.array(range(table.num_rows)), pa.array(["s"] * table.num_rows)],
                                        names=["ground_truth", "style"])
    pq.write_table(table.set_column(table.schema.get_field_index("reward_model"), "reward_model", reward), path)


def _empty_ground_truth(path: Path) -> None:
    rows = pq.read_table(path).to_pylist()
    rows[400]["reward_model"]["ground_truth"] = " "
    write_dapo(path, rows, row_group_size=128)


@pytest.mark.parametrize(
    "damage, message",
    [
        (_truncated, "data.dapo_math .*not a readable parquet file \\(truncated or corrupt"),
        (_drop_ability, "data.dapo_math .*missing column\\(s\\) ability"),
        (_integer_ground_truth, "column reward_model.ground_truth has type int64, expected string"),
        (_empty_ground_truth, "empty reward_model.ground_truth at row 400"),
        (lambda path: path.unlink(), "data.dapo_math=.*no such file"),
    ],
)
def test_bad_input_exits_2_and_leaves_out_dir_unchanged(tmp_path, sources, capsys, damage, message):
    out = tmp_path / "out"
    assert main(args(sources, out)) == 0
    before = listing(out)
    damage(sources["dapo_math"])
    capsys.readouterr()
    assert main([*args(sources, out), "--force"]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert listing(out) == before  # old outputs and manifest intact, no temporary files left


def test_corrupt_page_mid_file_is_reported_and_nothing_written(tmp_path, sources, capsys):
    rows = random_rows(1, 4000)
    path = sources["dapo_math"]
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path, row_group_size=500,
                   compression="snappy", use_dictionary=False)
    data = bytearray(path.read_bytes())
    metadata = pq.ParquetFile(path).metadata
    start = metadata.row_group(4).column(1).data_page_offset  # a prompt column chunk halfway through
    data[start + 20:start + 2000] = b"\xff" * 1980
    path.write_bytes(bytes(data))
    out = tmp_path / "out"
    assert main(args(sources, out)) == 2
    err = capsys.readouterr().err
    assert re.search(r"data.dapo_math .*reading failed after \d+ rows \(truncated or corrupt file\?\)", err), err
    assert not any(p.suffix == ".parquet" or ".tmp-" in p.name for p in out.iterdir())


def test_unknown_and_malformed_settings(tmp_path, sources, capsys):
    assert main(args(sources, tmp_path / "o", dapo="x")) == 2
    err = capsys.readouterr().err
    assert err.startswith("beam-slurm prepare-data: ")
    assert "data.dapo='x': unknown key" in err and "dapo_math" in err
    assert main(["out_dir=/tmp/x"]) == 2
    assert "out_dir='/tmp/x': unknown key" in capsys.readouterr().err
    assert main(["out_dir"]) == 2
    assert "settings are key=value" in capsys.readouterr().err
    assert main(args(sources, tmp_path / "o", overwrite="maybe")) == 2
    assert "data.overwrite is an old spelling, not accepted; use --force" in capsys.readouterr().err
    assert main(args(sources, tmp_path / "o", batch_rows="0")) == 2
    assert "data.batch_rows=0: must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_aime2025_list_of_opencompass_files(tmp_path, sources):
    files = write_aime2025_opencompass(tmp_path / "src")
    out = tmp_path / "out"
    assert main(args(sources, out, aime2025=f"[{files[0]},{files[1]}]", aime2025_data_source="aime25")) == 0
    rows = pq.read_table(out / OUTPUTS[2]).to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in rows] == [str(a) for a in AIME2025_ANSWERS]
    assert {r["data_source"] for r in rows} == {"aime25"}


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("hf://datasets/BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet",
         ("BytedTsinghua-SIA/DAPO-Math-17k", None, "data/dapo-math-17k.parquet")),
        ("hf://datasets/yentinglin/aime_2025", ("yentinglin/aime_2025", None, None)),
        ("hf://datasets/o/n@v1.0/a/b.jsonl", ("o/n", "v1.0", "a/b.jsonl")),
        ("hf://o/n@refs%2Fpr%2F3/f.parquet", ("o/n", "refs/pr/3", "f.parquet")),
    ],
)
def test_hub_address_syntax(spec, expected):
    address = parse_hub_address(spec, "data.x")
    assert (address.repo_id, address.revision, address.path_in_repo) == expected


@pytest.mark.parametrize("spec", ["hf://datasets/onlyowner", "hf://models/o/n/f", "hf://datasets/o/n@/f"])
def test_bad_hub_addresses(spec):
    with pytest.raises(BadDataInput, match="data.x="):
        parse_hub_address(spec, "data.x")


def _fake_hub_cache(home: Path, repo_id: str, commit: str, files: dict[str, Path]) -> None:
    """The hub cache layout huggingface_hub reads in offline mode: refs/main -> snapshots/<commit>/<path>."""
    repo = home / "hub" / ("datasets--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    for path_in_repo, source in files.items():
        target = repo / "snapshots" / commit / path_in_repo
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())


def test_hub_sources_offline_from_cache_record_revision_and_hide_token(tmp_path, sources):
    home = tmp_path / "hf"
    commit = "0123456789abcdef0123456789abcdef01234567"
    _fake_hub_cache(home, "org/dapo", commit, {"data/dapo-math-17k.parquet": sources["dapo_math"]})
    _fake_hub_cache(home, "org/aime25", commit, {"data/train-00000-of-00001.parquet": sources["aime2025"]})
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_secretTOKENvalue42"}
    out = tmp_path / "out"
    hub = {
        "dapo_math": "hf://datasets/org/dapo/data/dapo-math-17k.parquet",
        "aime2024": sources["aime2024"],
        "aime2025": "hf://datasets/org/aime25",
    }
    proc = subprocess.run([str(BEAM_SLURM), "prepare-data", *args(hub, out)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / MANIFEST_NAME).read_text())["outputs"]
    assert manifest[OUTPUTS[0]]["revisions"] == [commit] and manifest[OUTPUTS[2]]["revisions"] == [commit]
    assert manifest[OUTPUTS[2]]["rows_out"] == 30
    assert "hf_secret" not in proc.stdout + proc.stderr + (out / MANIFEST_NAME).read_text()

    missing = {**hub, "dapo_math": "hf://datasets/org/absent/data/x.parquet"}
    proc = subprocess.run([str(BEAM_SLURM), "prepare-data", *args(missing, tmp_path / "out2")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "data.dapo_math=hf://datasets/org/absent/data/x.parquet" in proc.stderr
    assert "HF_HUB_OFFLINE=1" in proc.stderr and "hf_secret" not in proc.stdout + proc.stderr
    assert not any(p.suffix == ".parquet" for p in (tmp_path / "out2").iterdir())


def test_hub_downloads_retry_network_errors_but_not_missing_files(monkeypatch):
    from huggingface_hub.errors import EntryNotFoundError

    from beam_slurm.jobs.data import sources

    waits: list[float] = []
    monkeypatch.setattr(sources.time, "sleep", waits.append)
    attempts = iter([ConnectionError("reset"), TimeoutError("slow"), "/cache/file.parquet"])

    def flaky():
        outcome = next(attempts)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert sources._with_retries(flaky, "download", "data.x", "hf://datasets/o/n/f", 5) == "/cache/file.parquet"
    assert waits == [1.0, 2.0]

    calls = []

    def missing():
        calls.append(1)
        raise EntryNotFoundError("404 file")

    with pytest.raises(BadDataInput, match="data.x=hf://datasets/o/n/f: file not found in the repository"):
        sources._with_retries(missing, "download", "data.x", "hf://datasets/o/n/f", 5)
    assert len(calls) == 1


HOLDER = """
import sys, time
from pathlib import Path
from beam_slurm.jobs.data.prepare import exclusive_lock
lock = exclusive_lock(Path(sys.argv[1]))
assert lock.try_acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_preparation_refuses_while_one_runs_and_takes_a_killed_ones_lock_over(tmp_path, sources, capsys):
    from beam_slurm.jobs.data.prepare import LOCK_HEARTBEAT_S, LOCK_NAME

    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline() == "held\n"
        started = time.monotonic()
        assert main(args(sources, out)) == 2
        waited = time.monotonic() - started
        err = capsys.readouterr().err
        assert f"data.out_dir={out}: another prepare-data is writing there; wait for it" in err
        assert waited < LOCK_HEARTBEAT_S + 2, f"refused after {waited:.1f} s: a try waits one heartbeat at most"
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME], "nothing written while refused"
    finally:
        holder.kill()
        holder.wait()
    # Killed: its lock is left behind, and the next preparation on this host takes it over at once, saying so.
    assert (out / LOCK_NAME).exists()
    assert main(args(sources, out)) == 0
    assert f"lock {LOCK_NAME}: taking over, holder pid {holder.pid} on" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUTS, MANIFEST_NAME])
