"""One argument convention for every verb: recipe keys through Hydra, flags only for what is not a setting, old
spellings refused with what to use instead, --help listing each verb's keys with the schema's defaults and docstrings,
one error prefix and exit status 2."""

from __future__ import annotations

import dataclasses
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from beam_slurm.cli import VERBS, verb_module
from beam_slurm.cli import main as beam_slurm
from beam_slurm.config.load import load_config
from beam_slurm.config.overrides import hydra_value, override, value_at
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.verb_args import OLD_SPELLINGS, VerbArgs, VerbUsageError, schema_keys

REPO = Path(__file__).resolve().parents[2]


def verb_parser(verb: str) -> VerbArgs:
    """The verb's parser: `build_parser()` beside its entry `main` in the verb's module."""
    module_name = verb_module(verb)
    builder = getattr(importlib.import_module(module_name), "build_parser", None)
    assert builder is not None, f"{module_name} has no build_parser(): every verb builds its parser with VerbArgs"
    return builder()


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_no_option_that_maps_to_a_schema_key_carries_a_default(verb):
    verb_args = verb_parser(verb)
    assert isinstance(verb_args, VerbArgs)
    known = schema_keys()
    assert set(verb_args.keys) <= set(known), set(verb_args.keys) - set(known)
    # Each old spelling names a key of the schema or a flag of the verb, and is no option of the verb any more.
    for old, new in OLD_SPELLINGS.get(verb, {}).items():
        assert verb_args.option(old) is None, (verb, old)
        assert new.split("=", 1)[0] in known or verb_args.option(new) is not None, (verb, old, new)
    leaf_names = {key.rsplit(".", 1)[-1] for key in verb_args.keys}
    for action in verb_args.parser._actions:
        flags = [s for s in action.option_strings if s.startswith("--")]
        if not flags:
            continue
        # An option named like one of the keys this verb reads would be a second way to set it, with its own default.
        names = {flag[2:].replace("-", "_") for flag in flags}
        assert not names & leaf_names, (verb, flags, "set this through its key")


def test_evaluation_settings_restate_no_default():
    from beam_slurm.jobs.evaluation.generate import ClientSettings, EngineSettings, SamplingSettings

    from_recipe = {
        SamplingSettings: {"n", "temperature", "top_p", "max_tokens", "reasoning_effort"},
        EngineSettings: {"tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend",
                         "max_prompt_tokens", "dtype", "gpu_memory_utilization", "enforce_eager"},
        ClientSettings: {"request_timeout_s", "max_attempts", "concurrency"},
    }
    for cls, names in from_recipe.items():
        for f in dataclasses.fields(cls):
            if f.name in names:
                assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, (cls, f.name)
    defaults = BeamConfig()
    sampling = SamplingSettings.from_config(defaults)
    assert (sampling.n, sampling.max_tokens, sampling.temperature, sampling.top_p, sampling.reasoning_effort) == (
        defaults.eval.responses_per_problem, defaults.generation.max_response_tokens, defaults.generation.temperature,
        defaults.generation.top_p, defaults.generation.reasoning_effort)


def test_every_schema_key_has_a_docstring():
    missing = [key for key, entry in schema_keys().items() if not entry.doc]
    assert not missing


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_help_keys_lists_the_verbs_keys_with_schema_defaults(verb, capsys):
    keys = verb_parser(verb).keys
    with pytest.raises(SystemExit) as stop:
        beam_slurm([verb, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: beam-slurm {verb}")
    if not keys:
        return
    assert not any(f"  {key}=" in out for key in keys)  # --help names sections; --help-keys lists the keys
    with pytest.raises(SystemExit) as stop:
        beam_slurm([verb, "--help-keys"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    known, recipe = schema_keys(), load_config([], validate=False)  # the defaults, derived ones filled in
    for key in keys:
        value = value_at(recipe, key)
        shown = "''" if value == "" else hydra_value(value)
        assert f"  {key}={shown}\n" in out, key
        first_words = " ".join(known[key].doc.split()[:3])
        assert first_words in " ".join(out.split()), key


def test_help_keys_of_a_sweep_shows_the_recipe_without_the_swept_settings(capsys):
    with pytest.raises(SystemExit) as stop:
        beam_slurm(["submit", "-m", "lora.rank=8,16", "lora.alpha=32", "--help-keys", "lora"])
    assert stop.value.code == 0
    captured = capsys.readouterr()
    assert "  lora.alpha=32\n" in captured.out and "  lora.rank=64\n" in captured.out  # the recipe's rank
    assert captured.err == "beam-slurm submit: --help-keys: values shown without the swept lora.rank=8,16 (one per run)\n"


def test_train_help_prints_help_not_a_configuration_error():
    def run(*argv):
        return subprocess.run([sys.executable, "-m", "beam_slurm.cli", "train", *argv], capture_output=True, text=True,
                              timeout=60, cwd=REPO)

    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert "--no-preflight" in result.stdout and "invalid configuration" not in result.stderr
    result = run("--help-keys", "cluster")
    assert result.returncode == 0, result.stderr
    assert "  cluster.grace_s=180\n" in result.stdout and "  cluster.max_requeues=10\n" in result.stdout


@pytest.mark.parametrize("verb, argv", [
    ("evaluate", ["--checkpoint", "/nonexistent"]),
    ("grade", ["--responses", "/nonexistent.jsonl", "--out", "/nonexistent-out"]),
    ("pull-container", []),
    ("prepare-data", []),
    ("plan", []),
    ("train", []),
    ("submit", ["--dry-run"]),
])
def test_bad_key_exits_2_with_the_verbs_prefix(verb, argv, capsys):
    assert beam_slurm([verb, *argv, "generation.no_such_key=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beam-slurm {verb}: "), err  # submit lists invalid runs in its own words
    assert "generation.no_such_key='1': unknown key; valid keys in generation: " in err
    assert beam_slurm([verb, *argv, "stray"]) == 2
    err = capsys.readouterr().err
    assert f"beam-slurm {verb}: unexpected argument 'stray': settings are key=value" in err
    assert beam_slurm([verb, *argv, "--no-such-flag"]) == 2
    assert f"beam-slurm {verb}: unrecognized arguments: --no-such-flag" in capsys.readouterr().err


@pytest.mark.parametrize("verb, argv", [("status", ["/nonexistent-run"]), ("report", ["/nonexistent-run"])])
def test_verbs_without_settings_share_the_prefix(verb, argv, capsys):
    assert beam_slurm([verb, *argv]) == 2
    assert capsys.readouterr().err.startswith(f"beam-slurm {verb}: ")
    assert beam_slurm([verb, *argv, "--no-such-flag"]) == 2
    assert f"beam-slurm {verb}: unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_old_flags_are_refused_naming_their_keys():
    verb = verb_parser("evaluate")
    for argv, old, use in [
            (["--k", "4", "eval.responses_per_problem=6", "--checkpoint", "/c"], "--k",
             "eval.responses_per_problem=4"),
            (["--checkpoint", "/c", "--tp=1"], "--tp", "rollout.tensor_parallel=1"),
            (["--enforce-eager"], "--enforce-eager", "eval.enforce_eager=true"),
            (["--reasoning-effort", "a b"], "--reasoning-effort", "generation.reasoning_effort='a b'"),
            (["eval.responses_per_problem=6", "--k"], "--k", "eval.responses_per_problem=VALUE")]:
        with pytest.raises(VerbUsageError) as refused:
            verb.parse(argv)
        assert str(refused.value) == f"{old} is an old spelling, not accepted; use {use}"


@pytest.mark.parametrize("verb, argv, message", [
    ("evaluate", ["RUN", "--k", "4"], "--k is an old spelling, not accepted; use eval.responses_per_problem=4"),
    ("grade", ["--responses", "r", "--out", "o", "--overwrite"],
     "--overwrite is an old spelling, not accepted; use --force"),
    ("grade", ["--workers", "2"], "--workers is an old spelling, not accepted; use grade.workers=2"),
    ("pull-container", ["--runtime", "pyxis"],
     "--runtime is an old spelling, not accepted; use container.runtime=pyxis"),
    ("prepare-data", ["data.overwrite=true", "data.batch_rows=5"],
     "data.overwrite is an old spelling, not accepted; use --force instead of data.overwrite=true"),
    ("prepare-data", ["data.overwrite=false"], "and nothing instead of data.overwrite=false"),
    ("submit", ["--dry-run", "data.overwrite=true"], "data.overwrite is an old spelling, not accepted; use --force"),
])
def test_old_spellings_exit_2_before_anything_else(verb, argv, message, capsys, monkeypatch):
    def compose(*args, **kwargs):
        raise AssertionError("the recipe was loaded")

    monkeypatch.setattr("beam_slurm.config.load.compose", compose)  # refused before the recipe is loaded
    assert beam_slurm([verb, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beam-slurm {verb}: ") and message in err, err


TRICKY = ["plain", "/x y/z", "it's", 'say "hi"', "a,b", "${HOME}/x", "$HOME", "$(id)", "a\\b", "a\\", "a\\'b",
          "[x]", "{a:b}", "null", "true", "5", "1e3", "a=b", " lead", "trail ", "x\\${y}", "", "-1", "#c", "a;b",
          "ghcr.io/o/skyrl:beam@sha256:0123abcd", "%x", "~x", "+x", "a\\\\${x}", "\\\\", "x\\'", "\\${", "'",
          "${oc.env:HOME}", "a\\b\\", "\n"]


@pytest.mark.parametrize("text", TRICKY)
def test_rendered_values_read_back_exactly(text):
    cfg = load_config([override("paths.data_dir", text), override("cluster.extra_sbatch_args", [text, "--x=1"])],
                      validate=False)
    assert cfg.paths.data_dir == text
    assert list(cfg.cluster.extra_sbatch_args) == [text, "--x=1"]


@pytest.mark.parametrize("key, value", [("eval.limit", None), ("eval.limit", 3), ("generation.temperature", 0.6),
                                        ("eval.enforce_eager", True), ("generation.top_p", 1e-06)])
def test_rendered_typed_values_read_back(key, value):
    assert value_at(load_config([override(key, value)], validate=False), key) == value


def test_environment_defaults_in_config_yaml_equal_the_schema(monkeypatch):
    """conf/config.yaml reads the seed's environment variables; with them unset, the schema's value holds."""
    text = (REPO / "conf" / "config.yaml").read_text()
    names = re.findall(r"\$\{oc\.env:([A-Z_]+),", text)
    assert "BEAM_CONTAINER_RUNTIME" in names and "BEAM_CONTAINER_CACHE_DIR" in names
    for name in names:
        monkeypatch.delenv(name, raising=False)
    composed = load_config([], validate=False)
    schema = BeamConfig()
    keys = {"max_training_steps", "rollout.kv_cache_dtype", "checkpoint.interval", "checkpoint.resume_mode",
            "trainer.backend", "container.runtime", "container.image", "container.image_cache_dir"}
    for key in keys:
        assert value_at(composed, key) == value_at(schema, key), key


def test_container_settings_come_from_the_environment_as_before(monkeypatch):
    monkeypatch.setenv("BEAM_CONTAINER_RUNTIME", "apptainer")
    monkeypatch.setenv("BEAM_CONTAINER_CACHE_DIR", "/shared/containers")
    cfg = load_config([], validate=False)
    assert (cfg.container.runtime, cfg.container.image_cache_dir) == ("apptainer", "/shared/containers")
    assert load_config(["container.runtime=pyxis"], validate=False).container.runtime == "pyxis"
