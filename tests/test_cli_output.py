"""What a person or a script meets at the command line: usage and help that fit a screen, `--help-keys` valued by the
recipe given, `--version`, a closed pipe that ends quietly with status 141, and paths or names the file system
would refuse reported as settings (exit 2) before anything is submitted. Each runs the real `beam-slurm` command
line, most as a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from beam_slurm.cli import VERBS
from beam_slurm.cli import main as beam_slurm
from beam_slurm.config.load import load_config
from beam_slurm.config.verb_args import keys_under, schema_keys
from beam_slurm.core.run_store import RunStore, now

REPO = Path(__file__).resolve().parents[1]
LONG_NAME = "x" * 300


def cli(*argv: str, stdout=subprocess.PIPE, env: dict | None = None) -> subprocess.CompletedProcess:
    """`beam-slurm ARGV` as its own process, importing this checkout."""
    return subprocess.run([sys.executable, "-m", "beam_slurm.cli", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120, cwd=REPO, env={**os.environ, **(env or {})})


def into_closed_pipe(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`beam-slurm ARGV | head` once head has gone: stdout is a pipe nobody reads any more."""
    read, write = os.pipe()
    os.close(read)
    try:
        return cli(*argv, stdout=write, env=env)
    finally:
        os.close(write)


@pytest.fixture
def recipe_paths(tmp_path) -> list[str]:
    """Settings for a plan that needs neither the model nor Slurm."""
    for name in ("model", "data", "skyrl"):
        (tmp_path / name).mkdir()
    return [f"paths.model_path={tmp_path / 'model'}", f"paths.data_dir={tmp_path / 'data'}",
            f"paths.skyrl_dir={tmp_path / 'skyrl'}", f"paths.export_path={tmp_path / 'exports' / 'run'}",
            "cluster.check_paths_on_submit=false", "cluster.ask_slurm_on_submit=false"]


# --- usage, help, version -------------------------------------------------------------------------------------------

def test_bare_command_prints_usage_to_stderr_and_exits_2():
    done = cli()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: beam-slurm") and all(verb in done.stderr for verb in VERBS)
    assert cli("--help").returncode == 0


def test_version_prints_the_package_version():
    from importlib.metadata import version

    done = cli("--version")
    assert done.returncode == 0 and done.stdout == f"beam-slurm {version('beam-slurm')}\n"


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_help_fits_a_screen_and_names_the_sections_read(verb, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal's width
    with pytest.raises(SystemExit) as stop:
        beam_slurm([verb, "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and len(out.splitlines()) <= 80, len(out.splitlines())
    if verb in ("plan", "submit", "train"):  # they read every key: each section is named, no key is listed
        assert len(out.splitlines()) <= 50
        for section in ("cluster", "paths", "eval", "container", "ray", "data"):
            assert f"\n  {section} " in out, section
        assert "cluster.nodes=" not in out and f"beam-slurm {verb} --help-keys cluster" in out


@pytest.mark.parametrize("verb, inputs", [
    ("requeue", "RUN [key=value ...]"), ("stop", "RUN [key=value ...]"), ("attach", "RUN [-- CMD ...]"),
    ("logs", "RUN"), ("sync", "RUN"), ("report", "RUN_OR_SWEEP [RUN_OR_SWEEP ...]"), ("status", "[RUN_OR_SWEEP]"),
    ("evaluate", "[RUN | SWEEP] [key=value ...]"), ("grade", "--responses FILE.jsonl --out DIR [key=value ...]"),
    ("plan", "[key=value ...]"), ("submit", "[key=value ...]"),
])
def test_usage_lines_name_the_positional_inputs(verb, inputs, capsys):
    with pytest.raises(SystemExit):
        beam_slurm([verb, "--help"])
    usage = capsys.readouterr().out.split("\n\n", 1)[0]
    assert " ".join(usage.split()).endswith(inputs), usage


def test_help_keys_shows_the_values_of_the_recipe_given():
    bf16 = load_config(["recipe=bf16_64gpu"], validate=False)
    assert bf16.cluster.nodes != schema_keys()["cluster.nodes"].default  # else this test could not tell them apart
    done = cli("plan", "recipe=bf16_64gpu", "--help-keys", "cluster")
    assert done.returncode == 0, done.stderr
    listed = [line.split("=", 1)[0].strip() for line in done.stdout.splitlines() if line.startswith("  cluster.")]
    assert listed == keys_under("cluster")
    assert f"\n  cluster.nodes={bf16.cluster.nodes}\n" in done.stdout
    assert f"(schema default: {schema_keys()['cluster.nodes'].default})" in done.stdout
    # A setting typed on the line counts too, wherever it stands; a bare --help-keys lists every key.
    done = cli("plan", "--help-keys", "recipe=bf16_64gpu", "cluster.nodes=6")
    assert done.returncode == 0, done.stderr
    assert "\n  cluster.nodes=6\n" in done.stdout and f"\n  precision={bf16.precision}\n" in done.stdout
    listed = [line.split("=", 1)[0][2:] for line in done.stdout.splitlines() if line[:3].strip() and line[:2] == "  "]
    assert listed == list(schema_keys())
    # A verb lists the keys it reads; its required inputs are not needed to ask.
    done = cli("grade", "--help-keys", "all")
    assert done.returncode == 0 and "  grade.workers=" in done.stdout and "cluster." not in done.stdout


def test_help_keys_of_an_unknown_section_or_a_bad_key_exits_2():
    done = cli("plan", "--help-keys", "clusters")
    assert done.returncode == 2 and "beam-slurm plan: --help-keys clusters: not a section this verb reads" in done.stderr
    done = cli("requeue", "--help-keys", "paths")
    assert done.returncode == 2 and "use one of cluster, or all" in done.stderr
    done = cli("plan", "--help-keys", "cluster", "cluster.nodez=3")
    assert done.returncode == 2 and "cluster.nodez='3': unknown key" in done.stderr and "Traceback" not in done.stderr


# --- a closed pipe --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["table", "json", "help-keys"])
def test_plan_into_a_closed_pipe_ends_quietly_with_141(how, recipe_paths):
    flags = {"table": [], "json": ["--json"], "help-keys": ["--help-keys"]}[how]
    done = into_closed_pipe("plan", *flags, *recipe_paths)
    assert (done.returncode, done.stderr) == (141, "")


@pytest.fixture
def started_run(tmp_path) -> Path:
    """A run whose training job (never in Slurm) has written its record and one node's log."""
    export = tmp_path / "exports" / "beam_lora_16gpu"
    RunStore(export).update(lambda run: (
        run.fill_in({"run_name": "beam_lora_16gpu", "recipe": "lora_16gpu", "export_path": str(export)}),
        run.begin_attempt(job_id="990001", attempt=0, nodes=["n1"], checkpoint=None, when=now(), partition="batch",
                          nodes_needed=1, user_exclude=[]))[1])
    attempt = export / "logs" / "990001-0"
    attempt.mkdir(parents=True)
    (attempt / "ray-n1.log").write_text("".join(f"line {i}\n" for i in range(200_000)))
    return export


def test_logs_into_a_closed_pipe_ends_quietly_with_141(started_run):
    assert cli("logs", str(started_run), "--node", "n1", "--lines", "3").stdout.endswith("line 199999\n")
    done = into_closed_pipe("logs", str(started_run), "--node", "n1", "--lines", "100000")
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.parametrize("argv", [["status", "{long}"], ["report", "{long}"], ["logs", "{long}"], ["sync", "{long}"],
                                  ["grade", "--responses", "{long}/r.jsonl", "--out", "{tmp}/graded"]])
def test_an_input_path_longer_than_the_file_system_takes_is_exit_2(argv, tmp_path):
    long = f"{tmp_path}/{LONG_NAME}"
    done = cli(*(word.format(long=long, tmp=tmp_path) for word in argv))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"beam-slurm {argv[0]}: {long}") and "(File name too long); shorten it" in done.stderr


# --- paths and names the file system would refuse ------------------------------------------------------------------

def test_a_tab_in_the_model_path_names_the_setting_not_a_yaml_traceback(recipe_paths, tmp_path):
    done = cli("plan", *recipe_paths, f"paths.model_path={tmp_path}/mo\tdel")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "paths.model_path: " in done.stderr and "holds a tab; fix: remove it" in done.stderr


def test_a_newline_from_the_environment_names_its_variable(recipe_paths, tmp_path):
    settings = [s for s in recipe_paths if not s.startswith("paths.model_path")]
    done = cli("submit", "--dry-run", *settings, env={"MODEL_PATH": f"{tmp_path}/a\nb"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "paths.model_path (from MODEL_PATH): " in done.stderr and "holds a newline" in done.stderr
    assert "nothing was submitted" in done.stderr


@pytest.mark.parametrize("verb", ["plan", "submit"])
def test_a_name_longer_than_the_file_system_takes_is_exit_2(verb, recipe_paths, tmp_path):
    flags = ["--dry-run"] if verb == "submit" else []
    done = cli(verb, *flags, *recipe_paths, f"paths.export_path={tmp_path}/{LONG_NAME}/run")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "Errno" not in done.stderr
    assert "paths.export_path: the name 'xxx" in done.stderr and "ENAMETOOLONG" in done.stderr
    assert done.stderr.count("ENAMETOOLONG") == 1  # not again for the log folder inside it
    assert not (tmp_path / LONG_NAME[:255]).exists()


def test_verbs_that_read_a_few_keys_check_their_paths_too(tmp_path, capsys):
    assert beam_slurm(["prepare-data", f"data.out_dir={tmp_path}/{LONG_NAME}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("beam-slurm prepare-data: invalid configuration") and "data.out_dir: the name" in err
    assert not (tmp_path / LONG_NAME[:255]).exists()


def test_a_run_name_with_a_trailing_newline_is_refused(recipe_paths):
    cfg = load_config([*recipe_paths, "run_name=ok"], validate=False)
    from beam_slurm.config.validation import problems

    cfg.run_name = "ok\n"
    assert [(p.key, p.problem) for p in problems(cfg)] == [("run_name", "'ok\\n' holds a newline")]
    cfg.run_name = "a" * 129
    assert [p.key for p in problems(cfg)] == ["run_name"]


def test_the_readme_quickstart_is_six_real_commands_starting_with_doctor(tmp_path, monkeypatch):
    import re
    import shlex
    import tomllib

    from beam_slurm.config import profiles

    text = (REPO / "README.md").read_text()
    assert text.index("## Quickstart on a real cluster") < text.index("## The two commands")
    block = text.split("## Quickstart on a real cluster", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    assert len(commands) == 6 and [c[0] for c in commands] == ["git"] + ["beam-slurm"] * 5
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(re.search(r"\.\[([a-z,]+)\]", block).group(1).split(",")) <= set(extras)
    assert [c[1] for c in commands[1:]] == ["doctor", "plan", "submit", "status", "report"]
    doctor = commands[1]
    assert doctor[2:5] == ["--probe", "--write", "mysite"]
    # What `doctor --write mysite` keeps: the partition it examined; plan and submit then select it by name.
    monkeypatch.setenv(profiles.CONFIG_DIR_ENV, str(tmp_path))
    partition = next(w.split("=", 1)[1] for w in doctor if w.startswith("cluster.partition="))
    profiles.write_profile("mysite", {"cluster.partition": partition})
    for command in commands[2:4]:
        cfg = load_config([word for word in command[2:] if "=" in word], validate=False)
        assert (cfg.recipe, cfg.cluster.partition) == ("lora_16gpu", partition)
    assert commands[5][2] == load_config(["recipe=lora_16gpu"], validate=False).run_name  # report finds it by name


def test_every_verb_has_a_module_named_after_it_and_the_readme_maps_it():
    from beam_slurm.cli import verb_module

    text = (REPO / "README.md").read_text().split("## Architecture", 1)[1].split("\n## ", 1)[0]
    for verb in VERBS:
        path = Path(*verb_module(verb).split("."))
        assert (REPO / path.with_suffix(".py")).is_file(), verb
        assert f"| {verb} | `{path.relative_to('beam_slurm').with_suffix('.py')}` |" in text, verb
    modules = {p.stem for p in (REPO / "beam_slurm" / "verbs").glob("*.py") if p.stem != "__init__"}
    assert modules == {verb.replace("-", "_") for verb in VERBS}, "verbs/ holds verbs only"
