"""The 24.11 cluster's pure parts of tools/slurm_sandbox.py (no sandbox): its own names beside 22.05's, what its
configuration changes, the `env` lines, the folders bound into its Debian 13 root and the client wrappers; and the
optional install part (skipped by default, exit 75 where Debian 13 cannot be reached)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_sandbox_tool import TOOL, load_tool

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tool():
    module = load_tool()
    assert module.SLURM_VERSION == "22.05", "another test left another version selected"
    yield module
    module.select_version("22.05")


def test_the_two_versions_share_no_machine_wide_name(tool):
    old, new = tool.SLURM_VERSIONS["22.05"], tool.SLURM_VERSIONS["24.11"]
    assert old.netns_prefix == "beamsb-" and old.daemon_marker == "BEAM_SANDBOX_DAEMON", "22.05 keeps its names"
    for field in ("default_state_dir", "state_dir_env", "bridge", "fabric_bridge", "slurmctld_port",
                  "slurmdbd_port", "mariadb_port", "daemon_marker", "lock_name", "subnet", "fabric_subnet"):
        assert getattr(old, field) != getattr(new, field), field
    # 22.05's code (in every other checkout too) removes what starts with its prefixes: 24.11's must not.
    for prefix in (new.netns_prefix, new.bridge, new.veth_prefix, new.fabric_bridge, new.fabric_veth_prefix):
        assert not prefix.startswith((old.netns_prefix, old.veth_prefix, old.fabric_veth_prefix)), prefix
    assert new.controller_ip == "10.79.0.1" and new.slurmctld_port == 16917


def test_interface_names_fit_linux_limit_on_64_nodes(tool):
    with tool.selected_version("24.11"):
        nodes = tool.make_nodes(64)
        names = [tool.BRIDGE, tool.FABRIC_BRIDGE] + [n.veth for n in nodes] + [n.fabric_veth for n in nodes]
        assert max(map(len, names)) <= 15, max(names, key=len)
        assert nodes[0].netns == "beamsb24-n1" and nodes[0].ip == "10.79.0.11" and nodes[0].fabric_ip == "10.80.0.11"


def test_selected_version_comes_back_to_22_05(tool):
    with tool.selected_version("24.11"):
        assert tool.NETNS_PREFIX == "beamsb24-" and tool.DAEMON_MARKER == "BEAM_SANDBOX_2411_DAEMON"
    assert tool.NETNS_PREFIX == "beamsb-" and tool.CONTROLLER_IP == "10.77.0.1" and tool.SLURM_ROOT is None
    assert tool.SLURMCTLD_PORT == 16817 and tool.LOCK_NAME == "beam-slurm-sandbox.lock"
    with pytest.raises(tool.SandboxError, match="choose one of"):
        tool.select_version("23.02")


def test_24_11_configuration_differs_where_slurm_changed(tool, tmp_path):
    layout = tool.Layout(tmp_path)
    nodes = tool.make_nodes(8)
    old = tool.slurm_conf_text(layout, nodes)
    assert "SwitchType=switch/none" in old and "SlurmctldParameters=preempt_send_user_signal" in old
    assert "CgroupPlugin=cgroup/v1" in tool.cgroup_conf_text()
    with tool.selected_version("24.11"):
        new = tool.slurm_conf_text(layout, tool.make_nodes(8))
        assert tool.cgroup_conf_text().splitlines()[-1] == "CgroupPlugin=disabled"
    assert "SwitchType" not in new and "preempt_send_user_signal" not in new
    assert "PreemptParameters=send_user_signal" in new
    assert "SlurmctldHost=ctl(10.79.0.1)" in new and "AccountingStoragePort=16919" in new
    # Everything else (partitions, lanes, QOS-related settings, GRES) is the same cluster.
    same = {line for line in old.splitlines() if "10.77." not in line and "1681" not in line} - {
        "SwitchType=switch/none", "SlurmctldParameters=preempt_send_user_signal"}
    assert same <= set(new.splitlines())


def test_env_lines(tool, tmp_path):
    layout = tool.Layout(tmp_path / "state dir")
    assert tool.env_lines(layout, "/usr/bin:/bin") == [
        f"export SLURM_CONF='{tmp_path}/state dir/etc/slurm.conf'",
        f"export BEAM_SANDBOX_SHARED='{tmp_path}/state dir/shared'"]
    with tool.selected_version("24.11"):
        tool.SLURM_ROOT = tmp_path / "root"  # as on Debian 12
        lines = tool.env_lines(layout, f"/usr/bin:{layout.bin}:/bin:")
    assert lines[1] == f"export PATH='{tmp_path}/state dir/bin:/usr/bin:/bin'", "its own clients first, once"
    assert [line.split("=")[0] for line in lines] == ["export SLURM_CONF", "export PATH", "export BEAM_SANDBOX_SHARED"]


def test_env_verb_prints_one_literal_export_a_line(tmp_path):
    env = {**os.environ, "BEAM_SANDBOX_2411_DIR": str(tmp_path / "s24"), "BEAM_SANDBOX_DIR": str(tmp_path / "s22"),
           "PATH": "/usr/bin:/bin"}
    new = subprocess.run([sys.executable, str(TOOL), "env", "--slurm-version", "24.11"], capture_output=True,
                         text=True, env=env, timeout=60, check=True).stdout.splitlines()
    old = subprocess.run([sys.executable, str(TOOL), "env"], capture_output=True, text=True, env=env, timeout=60,
                         check=True).stdout.splitlines()
    assert new[0] == f"export SLURM_CONF={tmp_path}/s24/etc/slurm.conf"
    assert new[1].startswith("export PATH=") and new[1].endswith(":/usr/bin:/bin")
    assert new[2] == f"export BEAM_SANDBOX_SHARED={tmp_path}/s24/shared"
    assert old == [f"export SLURM_CONF={tmp_path}/s22/etc/slurm.conf",
                   f"export BEAM_SANDBOX_SHARED={tmp_path}/s22/shared"]


def fake_venv(path: Path, interpreter: Path, editable: Path | None = None, pth: Path | None = None) -> Path:
    """A venv whose bin/python links (through a second link) to interpreter, as pyenv's venvs do."""
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python3").symlink_to(interpreter)
    (path / "bin" / "python").symlink_to("python3")
    site = path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if editable:
        (site / "__editable___pkg_0_1_finder.py").write_text(f"import sys\nMAPPING: dict[str, str] = "
                                                             f"{{'pkg': {str(editable)!r}}}\nNAMESPACES = {{}}\n")
    if pth:
        (site / "plain.pth").write_text(f"{pth}\nimport something\n")
    return path


def test_bind_paths_follow_the_venvs_to_their_interpreters(tool, tmp_path):
    prefix = tmp_path / "pyenv" / "versions" / "3.11.7"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3.11").write_text("")
    other_checkout = tmp_path / "main"
    (other_checkout / "pkg").mkdir(parents=True)
    fake_venv(other_checkout / ".venv", prefix / "bin" / "python3.11", editable=other_checkout / "pkg")
    checkout = tmp_path / "clone"
    checkout.mkdir()
    (checkout / ".venv").symlink_to(other_checkout / ".venv")  # a venv shared from another clone
    state = tmp_path / "clone" / "state"
    state.mkdir()
    extra = tmp_path / "data"
    extra.mkdir()
    paths = tool.bind_paths(checkout, state, f"{extra}::/usr/lib:/etc:/nowhere:/usr/local", mounts=[])
    assert paths[:2] == [Path("/root"), Path("/tmp")]
    assert Path("/usr/local") in paths and Path("/var/tmp") in paths
    # tmp_path is under /tmp, already bound as a whole: nothing below it is bound again...
    assert not [p for p in paths if str(p).startswith(str(tmp_path))]
    # ...unless a mount point lies between: then each path below it is bound on its own.
    paths = tool.bind_paths(checkout, state, str(extra), mounts=["/", str(tmp_path)])
    assert set(paths) >= {checkout, other_checkout / ".venv", prefix, other_checkout / "pkg", extra}
    assert state not in paths, "inside the checkout, bound with it"
    assert other_checkout not in paths and Path("/usr/lib") not in paths and Path("/etc") not in paths
    assert paths == sorted(paths, key=lambda p: (str(p).count("/"), str(p))), "parents before children"


def test_editable_sources_and_mountinfo_escapes(tool, tmp_path):
    (tmp_path / "src").mkdir()
    venv = fake_venv(tmp_path / "venv", Path("/bin/sh"), editable=tmp_path / "src", pth=tmp_path)
    assert set(tool.editable_sources(venv / "lib" / "python3.11" / "site-packages")) == {tmp_path / "src", tmp_path}
    assert tool.unescape_mount_path(r"/var/tmp/a\040b\134c") == "/var/tmp/a b\\c"


def test_client_wrapper_runs_the_root_program_in_the_callers_folder(tool, tmp_path):
    root = tmp_path / "root with space"
    query = tool.client_wrapper_text(root, "sinfo")
    submit = tool.client_wrapper_text(root, "sbatch")
    for text in (query, submit):
        assert subprocess.run(["sh", "-n"], input=text, text=True).returncode == 0
        assert f"exec /usr/sbin/chroot '{root}' /bin/sh -c" in text
    assert f"if [ -e /{tool.ROOT_STAMP} ]; then exec /usr/bin/sinfo" in query, "inside the root (a job): no chroot"
    assert "cd /" in query and "not visible inside the Slurm 24.11 root" in submit and "exit 1" in submit


def test_root_missing_says_how_to_build_it(tool, tmp_path):
    message = tool.root_problem(tmp_path)
    assert "sudo bash tools/install.sh 15-slurm-24.11-root" in message and str(tmp_path) in message


@pytest.mark.skipif(os.geteuid() != 0, reason="the install part runs as root")
def test_install_part_is_optional_and_exits_75_without_debian_13(tmp_path):
    tools = tmp_path / "tools"
    (tools / "install.d").mkdir(parents=True)
    shutil.copy(REPO / "tools" / "install.sh", tools / "install.sh")
    shutil.copy(REPO / "tools" / "install.d" / "15-slurm-24.11-root.sh", tools / "install.d")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    env = {**os.environ, "BEAM_DEBIAN_MIRROR": "http://127.0.0.1:9/debian",
           "BEAM_SLURM_2411_ROOT": str(tmp_path / "root")}
    env.pop("BEAM_SLURM_2411", None)
    skipped = subprocess.run(["bash", str(tools / "install.sh")], capture_output=True, text=True, env=env, timeout=120)
    assert skipped.returncode == 0 and "15-slurm-24.11-root skipped (optional: set BEAM_SLURM_2411=1" in skipped.stdout
    if Path("/etc/debian_version").read_text().startswith("13"):
        pytest.skip("a Debian 13 host uses its own Slurm 24.11: the part never needs the mirror")
    named = subprocess.run(["bash", str(tools / "install.sh"), "15-slurm-24.11-root"], capture_output=True,
                           text=True, env=env, timeout=120)
    assert named.returncode == 0, named.stdout + named.stderr
    assert "cannot be reached" in named.stderr and "not stamped" in named.stdout
    assert not list((tmp_path / ".venv-stamps").iterdir()) and not (tmp_path / "root").exists()
    part = subprocess.run(["bash", str(tools / "install.d" / "15-slurm-24.11-root.sh")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert part.returncode == 75


def test_a_bind_of_a_folder_removed_and_made_again_is_stale(tmp_path):
    """A checkout cloned anew at its old path: the root's bind still shows the removed folder, so `up` binds again."""
    tool = load_tool()
    checkout, bound = tmp_path / "checkout", tmp_path / "root-view"
    checkout.mkdir()
    assert not tool.stale_bind(checkout, checkout)  # a bind shows its source: same device and inode
    bound.mkdir()
    assert tool.stale_bind(checkout, bound)  # another folder (the removed one, as the bind still shows it)
    assert not tool.stale_bind(tmp_path / "gone", bound)  # nothing to bind: left to the missing-path rule
