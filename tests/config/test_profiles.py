"""Site profiles (`cluster=NAME`): found in conf/cluster/ and in the user's folder, chosen on the command line or by
BEAM_SLURM_CLUSTER, ranked below the command line and the environment and above the recipe; what `doctor --write`
writes reads back; `plan` names the profile and the keys it gave. No Slurm here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from beam_slurm.cli import main as beam_slurm
from beam_slurm.config import profiles
from beam_slurm.config.load import load_config, load_many
from beam_slurm.config.sources import env_sources, measured_keys, profile_of, value_source
from beam_slurm.core.errors import ConfigError
from beam_slurm.jobs.training import site_setup

PATHS = ["paths.model_path=/m", "paths.data_dir=/d", "paths.skyrl_dir=/s", "cluster.check_paths_on_submit=false"]


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """An empty user folder, and no profile chosen by the environment of whoever runs the tests."""
    folder = tmp_path / "config-home"
    monkeypatch.setenv(profiles.CONFIG_DIR_ENV, str(folder))
    for name in (profiles.SELECT_ENV, "SBATCH_PARTITION", "SBATCH_ACCOUNT", "SBATCH_QOS", "SBATCH_TIMELIMIT"):
        monkeypatch.delenv(name, raising=False)
    return folder


def write(folder, name: str, text: str):
    path = folder / "cluster" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# @package _global_\n" + text)
    return path


LAB = """
cluster:
  partition: lab-gpu
  account: proj
  nodes: 3
  constraint: h100
  setup: ['module load cuda/12.8']
trainer:
  extra_env: {NCCL_SOCKET_IFNAME: ib0}
"""


def test_no_profile_unless_one_is_named(user_dir):
    write(user_dir, "lab", LAB)
    cfg = load_config(["recipe=lora_16gpu"], validate=False)
    assert profile_of(cfg) is None and cfg.cluster.partition is None and cfg.cluster.nodes == 2


def test_the_repositorys_sandbox_profile(user_dir):
    cfg = load_config(["cluster=sandbox"], validate=False)
    assert cfg.cluster.partition == "batch" and cfg.trainer.backend == "rehearsal"
    profile = profile_of(cfg)
    assert profile is not None and profile.name == "sandbox" and profile.path.endswith("conf/cluster/sandbox.yaml")
    assert set(profile.keys) == {"cluster.partition", "cluster.fabric_interface", "trainer.backend"}


def test_the_documented_example_loads(user_dir):
    cfg = load_config(["cluster=example"], validate=False)
    assert cfg.cluster.setup == ["module load cuda/12.8"] and cfg.trainer.extra_env["NCCL_SOCKET_IFNAME"] == "ib0"


def test_a_user_profile_by_name_and_by_variable(user_dir, monkeypatch):
    write(user_dir, "lab", LAB)
    by_name = load_config(["recipe=lora_16gpu", "cluster=lab"], validate=False)
    monkeypatch.setenv(profiles.SELECT_ENV, "lab")
    by_variable = load_config(["recipe=lora_16gpu"], validate=False)
    for cfg in (by_name, by_variable):
        assert (cfg.cluster.partition, cfg.cluster.account, cfg.cluster.constraint) == ("lab-gpu", "proj", "h100")
        assert cfg.cluster.setup == ["module load cuda/12.8"] and cfg.trainer.extra_env == {"NCCL_SOCKET_IFNAME": "ib0"}
        assert profile_of(cfg).path == str(user_dir / "cluster" / "lab.yaml")
    # The command line's choice wins over the variable's.
    assert profile_of(load_config(["cluster=sandbox"], validate=False)).name == "sandbox"


def test_xdg_config_home_is_the_default_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(profiles.CONFIG_DIR_ENV, raising=False)
    monkeypatch.delenv(profiles.SELECT_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    write(tmp_path / "xdg" / "beam-slurm", "lab", LAB)
    assert load_config(["cluster=lab"], validate=False).cluster.partition == "lab-gpu"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert profiles.user_config_dir() == tmp_path / "home" / ".config" / "beam-slurm"


def test_precedence_command_line_then_sbatch_variables_then_profile_then_recipe(user_dir, monkeypatch):
    write(user_dir, "lab", LAB)
    cfg = load_config(["recipe=lora_16gpu", "cluster=lab"], validate=False)
    assert cfg.cluster.nodes == 3  # the profile over the recipe's 2
    assert cfg.cluster.grace_s == 180  # neither sets it: the schema's default
    monkeypatch.setenv("SBATCH_PARTITION", "from-env")
    cfg = load_config(["recipe=lora_16gpu", "cluster=lab"], validate=False)
    assert cfg.cluster.partition == "from-env" and env_sources(cfg)["cluster.partition"] == "SBATCH_PARTITION"
    assert "cluster.partition" not in profile_of(cfg).keys and value_source(cfg, "cluster.partition") == (
        "from SBATCH_PARTITION"
    )
    cfg = load_config(["recipe=lora_16gpu", "cluster=lab", "cluster.partition=typed", "cluster.nodes=5"], validate=False)
    assert (cfg.cluster.partition, cfg.cluster.nodes) == ("typed", 5)
    assert not {"cluster.partition", "cluster.nodes"} & set(profile_of(cfg).keys)
    assert value_source(cfg, "cluster.account") == "profile lab"


def test_a_profile_choice_is_not_a_key_and_a_section_key_is_still_checked(user_dir):
    write(user_dir, "lab", LAB)
    assert load_config(["cluster=lab", "cluster.qos=high"], validate=False).cluster.qos == "high"
    with pytest.raises(ConfigError) as caught:
        load_config(["cluster=lab", "cluster.partitoin=x"], validate=False)
    assert caught.value.problems[0].key == "cluster.partitoin" and "partition" in caught.value.problems[0].fix


def test_an_unknown_profile_names_where_it_looked(user_dir, monkeypatch):
    write(user_dir, "lab", LAB)
    with pytest.raises(ConfigError) as caught:
        load_config(["cluster=nope"], validate=False)
    problem = caught.value.problems[0]
    assert problem.key == "cluster" and problem.value == "nope" and problem.env is None
    assert "lab" in problem.fix and "sandbox" in problem.fix and str(user_dir / "cluster") in problem.fix
    monkeypatch.setenv(profiles.SELECT_ENV, "nope")
    with pytest.raises(ConfigError) as caught:
        load_config([], validate=False)
    assert caught.value.problems[0].env == profiles.SELECT_ENV
    assert "BEAM_SLURM_CLUSTER" in str(caught.value)


def test_a_sweep_keeps_the_profile(user_dir):
    write(user_dir, "lab", LAB)
    points = load_many([["cluster=lab", "lora.rank=8"], ["cluster=lab", "lora.rank=16", "cluster.nodes=4"]])
    assert [p.cluster.partition for p in points] == ["lab-gpu", "lab-gpu"]
    assert [p.cluster.nodes for p in points] == [3, 4]
    assert "cluster.nodes" in profile_of(points[0]).keys and "cluster.nodes" not in profile_of(points[1]).keys


def test_write_profile_reads_back_and_never_overwrites(user_dir):
    values = {
        "cluster.partition": "gpu",
        "cluster.storage_write_gbytes_per_s": 2.5,
        "site.measured": ["cluster.storage_write_gbytes_per_s"],
        "site.requeue_hold_s": 121.0,
    }
    path = profiles.write_profile("lab", values, header="written by a test\nsecond line")
    assert path == user_dir / "cluster" / "lab.yaml"
    text = path.read_text()
    assert text.startswith("# @package _global_\n# written by a test\n# second line\n")
    assert yaml.safe_load(text)["cluster"] == {"partition": "gpu", "storage_write_gbytes_per_s": 2.5}
    cfg = load_config(["cluster=lab"], validate=False)
    assert cfg.cluster.storage_write_gbytes_per_s == 2.5 and cfg.site.requeue_hold_s == 121.0
    assert measured_keys(cfg) == {"cluster.storage_write_gbytes_per_s"}
    assert value_source(cfg, "cluster.storage_write_gbytes_per_s") == "measured, profile lab"
    overruled = load_config(["cluster=lab", "cluster.storage_write_gbytes_per_s=9"], validate=False)
    assert measured_keys(overruled) == set() and value_source(overruled, "cluster.storage_write_gbytes_per_s") == ""
    with pytest.raises(profiles.ProfileExists) as caught:
        profiles.write_profile("lab", {"cluster.partition": "other"})
    assert "--force" in str(caught.value) and path.read_text() == text
    profiles.write_profile("lab", {"cluster.partition": "other"}, force=True)
    assert load_config(["cluster=lab"], validate=False).cluster.partition == "other"
    with pytest.raises(profiles.ProfileExists, match="repository"):
        profiles.write_profile("sandbox", {"cluster.partition": "x"})
    with pytest.raises(profiles.ProfileExists, match="plain file name"):
        profiles.write_profile("../escape", {"cluster.partition": "x"})


def test_plan_names_the_profile_and_what_it_gave(user_dir, capsys):
    profiles.write_profile(
        "lab",
        {"cluster.partition": "gpu", "cluster.storage_write_gbytes_per_s": 2.5,
         "site.measured": ["cluster.storage_write_gbytes_per_s"], "site.measured_at": "2026-12-05T10:00:00+00:00"},
    )
    assert beam_slurm(["plan", "recipe=lora_16gpu", "cluster=lab", "cluster.account=acct", *PATHS, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["profile"]["name"] == "lab" and plan["profile"]["measured"] == ["cluster.storage_write_gbytes_per_s"]
    assert plan["resources"]["partition"] == "gpu" and plan["resources"]["account"] == "acct"
    rows = {row["item"]: row["text"] for row in plan["rows"]}
    assert rows["site profile"].startswith("lab (") and "cluster.storage_write_gbytes_per_s (measured)" in rows[
        "site profile"
    ]
    assert "gpu (profile lab) / acct / " in rows["partition / account / qos"]
    assert "measured, profile lab" in rows["save"]
    assert beam_slurm(["plan", "recipe=lora_16gpu", *PATHS]) == 0
    assert "site profile" not in capsys.readouterr().out


def test_the_training_job_gets_the_profile_chosen_by_variable(user_dir, monkeypatch):
    from beam_slurm.launch.stages import Train

    write(user_dir, "lab", LAB)
    monkeypatch.setenv(profiles.SELECT_ENV, "lab")
    cfg = load_config(["recipe=lora_16gpu", *PATHS], validate=False)
    args = Train(cfg, ["recipe=lora_16gpu", *PATHS]).script_args()
    assert "cluster=lab" in args
    assert "--constraint=h100" in Train(cfg, []).render().request.argv()


def test_setup_lines_run_before_the_command_and_once(tmp_path):
    code = (
        "import os, sys; from beam_slurm.jobs.training import site_setup as s\n"
        "if s.needed(['x']): s.exec_after_setup(sys.argv[1:2])\n"
        "print(os.environ['SITE_VAR'], os.environ[s.SETUP_DONE_ENV])\n"
    )
    line = "export SITE_VAR='set by setup'"
    ok = subprocess.run([sys.executable, "-c", code, line], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == ["set by setup 1"]
    failing = subprocess.run(
        [sys.executable, "-c", code, "module-that-does-not-exist load cuda"], capture_output=True, text=True, timeout=60
    )
    assert failing.returncode != 0 and "cluster.setup failed" in failing.stderr and failing.stdout == ""
    assert not site_setup.needed([]) and not site_setup.needed(["x"], {site_setup.SETUP_DONE_ENV: "1"})
