"""What a user sees for a wrong setting: the key, the variable it came from, the value as given, our words only."""

import subprocess
import sys

import pytest

from beam_slurm.config.load import load_config
from beam_slurm.core.errors import ConfigError, ConfigProblem

PATHS = ["paths.model_path=/shared/models/beam", "paths.data_dir=/shared/data", "paths.skyrl_dir=/shared/SkyRL"]
# Text of the configuration libraries underneath; none of it belongs in a message to the user.
INTERNALS = ("oc.env", "${oc", "dereferencing", "interpolation '", "Error merging", "full_key", "object_type",
             "OmegaConf", "omegaconf", "hydra", "Hydra", "no viable alternative", "mismatched input", "See https",
             "In 'config'", "Could not find", "ValidationError", "None")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("MODEL_PATH", "DATA_DIR", "SKYRL_DIR", "RESUME_MODE", "MAX_TRAINING_STEPS", "CKPT_INTERVAL",
                "KV_CACHE_DTYPE", "RUN_NAME", "OPTIMIZER_STATE_DISK_DIR", "BEAM_TRAINER_BACKEND"):
        monkeypatch.delenv(var, raising=False)


def problems_of(overrides: list[str]) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    return err.value.problems


def test_zero_from_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("CKPT_INTERVAL", "0")
    (problem,) = problems_of(["recipe=lora_16gpu", *PATHS])
    assert str(problem).startswith("checkpoint.interval (from CKPT_INTERVAL)=0: ")
    assert problem.env == "CKPT_INTERVAL" and problem.key == "checkpoint.interval"


@pytest.mark.parametrize("var, key, text", [("CKPT_INTERVAL", "checkpoint.interval", "abc"),
                                            ("CKPT_INTERVAL", "checkpoint.interval", "1.5"),
                                            ("MAX_TRAINING_STEPS", "max_training_steps", "fifty")])
def test_text_where_a_number_belongs_shows_the_text_and_the_variable(monkeypatch, var, key, text):
    monkeypatch.setenv(var, text)
    (problem,) = problems_of(["recipe=bf16_64gpu", *PATHS])
    message = str(problem)
    assert message.startswith(f"{key} (from {var})={text!r}: expected a whole number")
    assert var in problem.fix  # the fix says which variable to change
    assert not [word for word in INTERNALS if word in message], message


def test_every_bad_environment_value_is_reported_in_one_round(monkeypatch):
    monkeypatch.setenv("CKPT_INTERVAL", "abc")
    monkeypatch.setenv("MAX_TRAINING_STEPS", "x")
    assert {p.env for p in problems_of(["recipe=lora_16gpu", *PATHS])} == {"CKPT_INTERVAL", "MAX_TRAINING_STEPS"}


def test_an_override_on_the_command_line_is_not_blamed_on_the_environment(monkeypatch):
    monkeypatch.setenv("CKPT_INTERVAL", "5")
    (problem,) = problems_of(["recipe=lora_16gpu", *PATHS, "checkpoint.interval=0"])
    assert problem.env is None and str(problem).startswith("checkpoint.interval=0: ")


def test_a_set_variable_that_is_fine_is_not_mentioned(monkeypatch):
    monkeypatch.setenv("CKPT_INTERVAL", "5")
    problems = problems_of(["recipe=lora_16gpu", *PATHS, "lora.rank=-1"])
    assert [(p.key, p.env) for p in problems] == [("lora.rank", None)]


def test_unknown_recipe_is_shown_by_the_name_given():
    (problem,) = problems_of(["recipe=lora_61gpu", *PATHS])
    assert str(problem).startswith("recipe='lora_61gpu': unknown recipe; choose one of: bf16_64gpu, lora_16gpu")
    assert not [word for word in INTERNALS if word in str(problem)]


@pytest.mark.parametrize("override, key, words", [
    ("cluster.nodes=abc", "cluster.nodes", "expected a whole number"),
    ("cluster.nodes=[1", "cluster.nodes", "cannot parse this override"),
    ("lora=3", "lora", "expected a section"),
    ("cluster.extra_sbatch_args=3", "cluster.extra_sbatch_args", "expected a list"),
    ("generation.temperature=hot", "generation.temperature", "expected a number"),
    ("cluster.fabric_check=maybe", "cluster.fabric_check", "true or false"),
    ("cluster.nodez=1", "cluster.nodez", "unknown key; valid keys in cluster: nodes,"),
    ("paths.model_path=/m/${x}", "paths.model_path", "for a literal '${' write '\\${'"),
    ("paths.model_path=${paths.nope}", "paths.model_path", "reference to another setting"),
])
def test_bad_override_is_said_in_our_words(override, key, words):
    (problem,) = problems_of(["recipe=lora_16gpu", *PATHS, override])
    message = str(problem)
    assert problem.key == key and words in message, message
    assert not [word for word in INTERNALS if word in message], message
    assert override.split("=", 1)[1] in message  # the value as typed, never None


def test_a_reference_that_resolves_is_a_hydra_feature_and_stays_one():
    cfg = load_config(["recipe=lora_16gpu", *PATHS, "paths.ckpt_path=${paths.data_dir}/ck"])
    assert cfg.paths.ckpt_path == "/shared/data/ck"


def test_escaped_reference_is_literal_text():
    cfg = load_config(["recipe=lora_16gpu", "paths.model_path=/m/\\${x}", *PATHS[1:]])
    assert cfg.paths.model_path == "/m/${x}"


def test_the_cli_prints_the_variable_and_the_verb_exits_2(monkeypatch):
    out = subprocess.run([sys.executable, "-m", "beam_slurm.cli", "plan", "recipe=lora_16gpu", *PATHS,
                          "cluster.check_paths_on_submit=false"], capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "CKPT_INTERVAL": "abc"})
    assert out.returncode == 2 and out.stdout == ""
    assert "checkpoint.interval (from CKPT_INTERVAL)='abc': expected a whole number" in out.stderr
    assert not [word for word in INTERNALS if word in out.stderr], out.stderr


def test_one_problem_type_for_the_whole_package():
    from pathlib import Path

    import beam_slurm
    from beam_slurm.config.container import ContainerSettings
    from beam_slurm.config.container_runtime import validate

    package = Path(beam_slurm.__file__).parent
    defined = [p.relative_to(package) for p in package.rglob("*.py") if "class ConfigProblem" in p.read_text()]
    assert [str(p) for p in defined] == ["core/errors.py"]
    (problem,) = validate(ContainerSettings(runtime="pyxis", image=""))
    assert type(problem) is ConfigProblem
    assert str(problem).startswith("container.image: runtime 'pyxis' needs an image; fix: set container.image=")


@pytest.mark.parametrize("override, key, words", [
    ("+lora.rnak=32", "lora.rnak", "did you mean 'lora.rank'?"),
    ("lora.rnak=32", "lora.rnak", "did you mean 'lora.rank'?"),
    ("clster.nodes=4", "clster.nodes", "'clster' is not a section; did you mean 'cluster'?"),
    ("+foo=1", "foo", "unknown key"),
    ("+cluster.nodes_x=2", "cluster.nodes_x", "valid keys in cluster: nodes,"),
])
def test_an_unknown_key_is_refused_with_the_nearest_known_name(override, key, words):
    (problem,) = problems_of(["recipe=lora_16gpu", *PATHS, override])
    assert problem.key == key and words in str(problem), str(problem)


def test_plus_adds_only_entries_of_the_open_mappings_and_a_sweep_point_is_checked_too():
    from beam_slurm.config.load import load_many

    cfg = load_config(["recipe=lora_16gpu", *PATHS, "+trainer.extra_env.MY_FLAG=1", "+ray.extra_env.RAY_X=2"])
    assert cfg.trainer.extra_env["MY_FLAG"] == "1" and cfg.ray.extra_env["RAY_X"] == "2"
    good, bad = load_many([["recipe=lora_16gpu", *PATHS], ["recipe=lora_16gpu", *PATHS, "clster.nodes=2"]])
    assert not isinstance(good, ConfigError) and isinstance(bad, ConfigError)
    assert "did you mean 'cluster'?" in str(bad)
