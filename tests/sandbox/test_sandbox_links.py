"""tools/slurm_sandbox.py links slurm.conf and every file Slurm reads beside it (cli_filter.lua, gres.conf, ...) where
a plain `sbatch` looks, and `down` removes those links; a file of the machine's own stays. No sandbox here: the links
go into a temporary folder standing in for /etc/slurm."""

from __future__ import annotations

import os
from pathlib import Path

from test_sandbox_tool import load_tool


def _sandbox_files(tool, root: Path):
    layout = tool.Layout(root)
    layout.etc.mkdir(parents=True)
    texts = tool.slurm_file_texts(layout, tool.make_nodes(2), "password")
    for name, text in texts.items():
        (layout.etc / name).write_text(text)
    return layout, texts


def test_every_file_written_beside_slurm_conf_is_linked(tmp_path):
    tool = load_tool()
    layout, texts = _sandbox_files(tool, tmp_path / "state")
    assert {"slurm.conf", "cli_filter.lua", "gres.conf", "cgroup.conf"} <= set(texts)
    system = tmp_path / "etc-slurm"
    assert tool.system_links(layout, system) == {system / name: layout.etc / name for name in texts}
    tool.link_system_slurm_conf(layout, system)
    assert sorted(p.name for p in system.iterdir()) == sorted(texts)
    assert all(os.readlink(system / name) == str(layout.etc / name) for name in texts)
    tool.link_system_slurm_conf(layout, system)  # again: nothing changes
    assert sorted(p.name for p in system.iterdir()) == sorted(texts)
    (system / "unrelated.conf").write_text("the machine's\n")
    tool.unlink_system_slurm_conf(system)
    assert [p.name for p in system.iterdir()] == ["unrelated.conf"]


def test_the_machines_own_files_stay(tmp_path):
    tool = load_tool()
    layout, _ = _sandbox_files(tool, tmp_path / "state")
    system = tmp_path / "etc-slurm"
    system.mkdir()
    (system / "cgroup.conf").write_text("the machine's\n")
    tool.link_system_slurm_conf(layout, system)
    assert (system / "cgroup.conf").read_text() == "the machine's\n" and (system / "cli_filter.lua").is_symlink()
    tool.unlink_system_slurm_conf(system)
    assert [p.name for p in system.iterdir()] == ["cgroup.conf"]
    # A slurm.conf of the machine's own: nothing is linked, nothing removed.
    (system / "slurm.conf").write_text("ClusterName=real\n")
    tool.link_system_slurm_conf(layout, system)
    tool.unlink_system_slurm_conf(system)
    assert sorted(p.name for p in system.iterdir()) == ["cgroup.conf", "slurm.conf"]
