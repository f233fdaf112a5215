"""Rendered container commands: golden files, quoting proven through a real shell, validation, runtime `none` run for
real. No container runtime exists here, so pyxis and Apptainer are checked by what they would be given."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from golden_commands import (
    RENDERERS,
    TRICKY_COMMAND,
    TRICKY_DIR,
    golden_mismatch,
    job_mounts,
    rendered_apptainer,
    rendered_pyxis,
    tricky_settings,
)

from beam_slurm.config.container import ContainerSettings, Mount, parse_mount
from beam_slurm.config.container_runtime import (
    cached_image_path,
    command_prefix,
    container_environment,
    digest_record_path,
    enroot_reference,
    image_file_name,
    resolved_image,
    srun_container_args,
    validate,
)
from beam_slurm.config.load import load_config
from beam_slurm.core.errors import ConfigError

HERE = Path(__file__).parent
RECORD_ARGV = HERE.parent / "support" / "test_doubles" / "record_argv"


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_rendered_command_matches_golden_file(name):
    """Compares only: after an intended change, `python tests/config/update_golden.py` rewrites the files."""
    problem = golden_mismatch(name)
    assert problem is None, (f"{problem}; if the change is intended, run "
                             "`.venv/bin/python tests/config/update_golden.py` and review the diff")


def test_a_drifted_golden_file_fails_whatever_the_environment_and_only_the_command_rewrites_it(tmp_path, monkeypatch):
    import update_golden

    drifted = tmp_path / "pyxis_srun.sh"
    drifted.write_text("srun --an-old-rendering\n")
    monkeypatch.setenv("UPDATE_GOLDEN", "1")  # the old way to make the check pass; it must not any more
    assert golden_mismatch("pyxis_srun.sh", tmp_path) is not None
    assert drifted.read_text() == "srun --an-old-rendering\n"
    assert update_golden.main(tmp_path) == 0
    assert golden_mismatch("pyxis_srun.sh", tmp_path) is None and golden_mismatch("apptainer_srun.sh", tmp_path) is None


def test_pyxis_arguments_are_the_expected_options():
    argv = rendered_pyxis()
    assert "--container-image=ghcr.io#example/skyrl:beam-release" in argv
    mounts = next(a for a in argv if a.startswith("--container-mounts=")).removeprefix("--container-mounts=")
    assert mounts.split(",") == [
        f"{TRICKY_DIR}/out:{TRICKY_DIR}/out",
        "/shared/models/beam 501B:/shared/models/beam 501B:ro",
        f"{TRICKY_DIR}/data:{TRICKY_DIR}/data:ro",
        "/etc/hostname:/host name$1:ro",
        f"{TRICKY_DIR}/extra:/opt/extra",
    ]
    for option in ("--no-container-mount-home", "--container-name=beam-slurm-4711", "--container-writable",
                   "--container-env=PYTHONPATH,HF_HOME", f"--container-workdir={TRICKY_DIR}/work"):
        assert option in argv
    assert "apptainer" not in argv


def test_apptainer_prefix_binds_each_mount_and_ends_with_the_image():
    argv = rendered_apptainer()
    start = argv.index("apptainer")
    prefix = argv[start : argv.index("python")]
    assert prefix[:4] == ["apptainer", "exec", "--nv", "--no-home"]
    assert prefix[-1] == "/shared/images/sky rl's $x.sif"
    binds = [prefix[i + 1] for i, a in enumerate(prefix) if a == "--bind"]
    assert len(binds) == 5 and binds[-1] == f"{TRICKY_DIR}/extra:/opt/extra"
    assert ["--overlay", "/shared/over lay$.img:ro"] == prefix[prefix.index("--overlay") : prefix.index("--overlay") + 2]
    assert "--writable-tmpfs" in prefix and "--cleanenv" not in prefix
    assert not any(a.startswith("--container") for a in argv)


@pytest.mark.parametrize("render", [rendered_pyxis, rendered_apptainer])
def test_rendered_line_survives_a_real_shell_unchanged(tmp_path, render):
    """The script line, run by bash, hands srun exactly the argv we built: nothing expanded, split or globbed."""
    argv = render()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").symlink_to(RECORD_ARGV)
    script = tmp_path / "step.sh"
    script.write_text("#!/bin/bash\nset -eu\n" + shlex.join(argv) + "\n")
    record = tmp_path / "argv.json"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD_ARGV_FILE": str(record), "HOME": "/nonexistent"}
    subprocess.run(["bash", str(script)], env=env, check=True, cwd=tmp_path, timeout=30)
    assert json.loads(record.read_text()) == argv[1:]


def test_runtime_none_adds_nothing_and_runs_the_command_for_real(tmp_path):
    settings = ContainerSettings(runtime="none", mounts=["/etc:/etc:ro"], workdir="/tmp")
    assert srun_container_args(settings, job_mounts(), container_name="x") == []
    assert command_prefix(settings, job_mounts()) == []
    assert container_environment(settings, {"PYTHONPATH": "/x"}) == {}
    argv = [*command_prefix(settings, []), sys.executable, *TRICKY_COMMAND[1:]]
    direct = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)
    script = tmp_path / "run.sh"
    script.write_text(shlex.join(argv) + "\n")
    via_shell = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True, timeout=30)
    expected = repr(TRICKY_COMMAND[3:]) + "\n"
    assert direct.stdout == expected and via_shell.stdout == expected


def test_env_passthrough_goes_by_name_never_by_value():
    environ = {"PYTHONPATH": "/secret/value", "HF_HOME": "/hf", "OTHER": "x"}
    apptainer = tricky_settings("apptainer", "/shared/images/a.sif")
    assert container_environment(apptainer, environ) == {"APPTAINERENV_PYTHONPATH": "/secret/value", "APPTAINERENV_HF_HOME": "/hf"}
    for argv in (rendered_pyxis(), rendered_apptainer()):
        assert not any("/secret/value" in a for a in argv)


def test_registry_image_is_replaced_by_the_complete_cached_file(tmp_path):
    settings = ContainerSettings(runtime="pyxis", image="nvcr.io/nvidia/pytorch:24.01-py3", image_cache_dir=str(tmp_path))
    cached = cached_image_path(settings)
    assert cached == tmp_path / "nvcr.io+nvidia+pytorch+24.01-py3.sqsh"
    assert resolved_image(settings) == "nvcr.io#nvidia/pytorch:24.01-py3"
    cached.write_text("image")
    assert resolved_image(settings) == "nvcr.io#nvidia/pytorch:24.01-py3", "an import without its record is not complete"
    digest_record_path(cached).write_text("{}")
    assert resolved_image(settings) == str(cached)
    apptainer = ContainerSettings(runtime="apptainer", image="nvcr.io/nvidia/pytorch:24.01-py3")
    assert resolved_image(apptainer) == "docker://nvcr.io/nvidia/pytorch:24.01-py3"


def test_reference_forms():
    assert enroot_reference("ubuntu:22.04") == "ubuntu:22.04"
    assert enroot_reference("docker://localhost:5000/a/b:1") == "localhost:5000#a/b:1"
    assert enroot_reference("nvcr.io#nvidia/pytorch:24.01") == "nvcr.io#nvidia/pytorch:24.01"
    digest = "sha256:" + "ab" * 32
    assert image_file_name(f"ghcr.io/o/i@{digest}", "apptainer") == f"ghcr.io+o+i+sha256+{'ab' * 32}.sif"


@pytest.mark.parametrize(
    "settings,key,words",
    [
        (ContainerSettings(runtime="docker"), "container.runtime", "unknown runtime"),
        (ContainerSettings(runtime="pyxis"), "container.image", "needs an image"),
        (ContainerSettings(runtime="apptainer", image="images/skyrl.sif"), "container.image", "absolute"),
        (ContainerSettings(runtime="pyxis", image="/shared/skyrl.sif"), "container.image", "not an image file pyxis"),
        (ContainerSettings(runtime="pyxis", image="bob:hunter2@ghcr.io/o/i:t"), "container.image", "credentials"),
        (ContainerSettings(runtime="pyxis", image="ghcr.io/o/i:t; rm -rf /"), "container.image", "not a registry reference"),
        (ContainerSettings(mounts=["data:/data"]), "container.mounts[0]", "not an absolute path"),
        (ContainerSettings(mounts=["/a,b:/data"]), "container.mounts[0]", "','"),
        (ContainerSettings(mounts=["/a:/b:/c"]), "container.mounts[0]", "':'"),
        (ContainerSettings(mounts=["/a:/b:rx"]), "container.mounts[0]", "host_path:container_path"),
        (ContainerSettings(env_passthrough=["HF_TOKEN=abc"]), "container.env_passthrough[0]", "names only"),
        (ContainerSettings(workdir="work"), "container.workdir", "absolute"),
        (ContainerSettings(image_cache_dir="~/containers"), "container.image_cache_dir", "absolute"),
        (ContainerSettings(root_filesystem="rw"), "container.root_filesystem", "unknown mode"),
        (ContainerSettings(runtime="pyxis", image="a/b:c", overlay="/o.img"), "container.overlay", "Apptainer feature"),
    ],
)
def test_validation_names_the_key_and_the_fix(settings, key, words):
    problems = validate(settings)
    matching = [p for p in problems if p.key == key]
    assert matching, f"expected a problem for {key}, got {problems}"
    assert words in matching[0].problem + matching[0].fix
    assert matching[0].fix and key in str(matching[0])


def test_job_mount_with_a_comma_is_rejected_and_valid_settings_pass():
    assert validate(ContainerSettings(runtime="pyxis", image="ghcr.io/o/i:t"), [Mount("/data,1", "/data")])
    good = tricky_settings("pyxis", "ghcr.io/example/skyrl:beam-release")
    good.workdir, good.mounts = "/work dir", ["/etc/hostname:/host name$1:ro"]
    assert validate(good, job_mounts()[:1]) == []
    assert validate(ContainerSettings()) == []


def test_on_cluster_check_finds_no_pyxis_in_this_hosts_srun():
    problems = validate(ContainerSettings(runtime="pyxis", image="ghcr.io/o/i:t"), on_cluster=True)
    assert [p.key for p in problems] == ["container.runtime"] and "pyxis" in problems[0].problem


def test_settings_from_config_mapping_rejects_unknown_keys():
    settings = load_config(["container.runtime=apptainer", "container.image=/x.sif", "container.mounts=[/a:/b]"],
                           validate=False).container
    assert settings.runtime == "apptainer" and parse_mount(settings.mounts[0]) == Mount("/a", "/b")
    with pytest.raises(ConfigError, match="imgae"):
        load_config(["container.imgae=x"], validate=False)
