"""Every schema key is read by some code path of the product: a key nobody reads is a setting that does nothing.

The recipe objects are the schema's dataclasses; while the verbs' and the job's code runs on them in this process,
each read of a field is recorded (a `__getattribute__` of the schema classes, put in place for the test). Reads made
to load, check or dump the whole recipe (load_config's validation, config.yaml) do not count: they read every key.
The nodes read the `ray` section from the job spec in processes of their own, under a live Ray: those keys are
counted from the source instead, as an attribute read of the field in `jobs/ray_cluster/` and the modules it uses from below.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
from pathlib import Path

from pipeline_inputs import IMAGE, fake_runtime_bin

from beam_slurm.config import load as load_module
from beam_slurm.config.load import load_config
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.verb_args import schema_keys

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ["lora_16gpu", "lora_32gpu", "bf16_64gpu", "mxfp8_64gpu"]


def _sections() -> dict[type, str]:
    """Schema class -> its dotted path ('' for the root)."""
    found: dict[type, str] = {}

    def walk(cls: type, prefix: str) -> None:
        found[cls] = prefix
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                walk(type(default), f"{prefix}{f.name}.")

    walk(BeamConfig, "")
    return found


class ReadRecorder:
    def __init__(self):
        self.read: set[str] = set()
        self.paused = 0

    @contextlib.contextmanager
    def installed(self):
        sections = _sections()
        originals = {cls: cls.__getattribute__ for cls in sections}
        recorder = self

        def make(cls: type, prefix: str):
            names = {f.name for f in dataclasses.fields(cls)}
            original = originals[cls]

            def getattribute(obj, name):
                if not recorder.paused and name in names:
                    recorder.read.add(prefix + name)
                return original(obj, name)
            return getattribute

        for cls, prefix in sections.items():
            cls.__getattribute__ = make(cls, prefix)
        try:
            yield self
        finally:
            for cls, original in originals.items():
                cls.__getattribute__ = original

    def pausing(self, function):
        def wrapped(*args, **kwargs):
            self.paused += 1
            try:
                return function(*args, **kwargs)
            finally:
                self.paused -= 1
        return wrapped


def _exercise(cfg, overrides: list[str], tmp_path: Path, monkeypatch) -> None:
    """What the verbs and the training job do with a loaded recipe (nothing is submitted)."""
    from beam_slurm.config.validation import path_problems
    from beam_slurm.jobs.container_pull import pull_image
    from beam_slurm.jobs.data.prepare import _prepare_out_dir, plans
    from beam_slurm.jobs.evaluation.generate import ClientSettings, EngineSettings, SamplingSettings
    from beam_slurm.jobs.evaluation.grading_pool import GradingLimits
    from beam_slurm.jobs.training import site_setup
    from beam_slurm.jobs.training.job_settings import job_settings
    from beam_slurm.jobs.training.tracking import job_env
    from beam_slurm.launch.eval_array import launcher_parameters
    from beam_slurm.launch.eval_request import chained_overrides
    from beam_slurm.launch.stages import PrepareData, PullContainer, Train
    from beam_slurm.verbs import train as train_cli
    from beam_slurm.verbs.plan import plan_rows, slurm_check
    from beam_slurm.verbs.submit import stalled_attempt_problems

    plan_rows(cfg)
    site_setup.needed(cfg.cluster.setup)  # as `beam-slurm train` asks before anything else
    Train(cfg, overrides).render()
    PrepareData(cfg, []).render()
    PullContainer(cfg).render()
    settings, _ = job_settings(cfg)
    settings.container("1")
    job_env(cfg, {"SLURM_JOB_ID": "1"})
    SamplingSettings.from_config(cfg)
    EngineSettings.from_config(cfg, ray_cluster=False)
    ClientSettings.from_config(cfg, "http://localhost:1", None)
    GradingLimits.from_settings(cfg.grade)
    launcher_parameters(load_config(chained_overrides(cfg, 1), validate=False))
    cfg.data.problems()
    path_problems(cfg)
    plans(cfg.data)
    _prepare_out_dir(cfg.data, str(tmp_path / "data"))
    chain = train_cli.EvalChain(cfg)
    monkeypatch.setattr(train_cli, "submit_for_checkpoint", lambda *args: "1")
    chain.submit(1, tmp_path)
    stalled_attempt_problems(cfg)
    slurm_check(cfg, overrides)
    if cfg.container.runtime == "pyxis":
        pull_image(cfg.container, executable=str(fake_runtime_bin(tmp_path / "bin") / "enroot"))


def _ray_keys_read_on_the_nodes() -> set[str]:
    """`ray.<field>` for every RaySettings field some ray_cluster/ module (not the settings class) reads."""
    from beam_slurm.config.ray import RaySettings

    fields = {f.name for f in dataclasses.fields(RaySettings)}
    read: set[str] = set()
    package = ROOT / "beam_slurm"
    # the Ray bootstrap's folder, and the modules it uses from below (ports, the job spec, the environment, records)
    paths = [*(package / "jobs" / "ray_cluster").glob("*.py"), package / "config" / "ports.py",
             package / "config" / "job_spec.py", package / "config" / "env_manifest.py",
             package / "core" / "ray_records.py"]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in fields and isinstance(node.ctx, ast.Load):
                read.add(f"ray.{node.attr}")
    return read

def test_every_schema_key_is_read_by_the_product(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("BEAM_SLURM_HOME", str(ROOT))
    base = [f"paths.model_path={tmp_path}", f"paths.data_dir={tmp_path}", f"paths.skyrl_dir={tmp_path}"]
    variants = [[f"recipe={name}"] for name in RECIPES] + [
        ["recipe=lora_16gpu", "trainer.backend=rehearsal", "trainer.logger=wandb", "eval.chain=true"],
        ["recipe=bf16_64gpu", "container.runtime=apptainer", f"container.image={tmp_path}/i.sif"],
        ["recipe=mxfp8_64gpu", "container.runtime=pyxis", f"container.image={IMAGE}",
         f"container.image_cache_dir={tmp_path}/cache", "checkpoint.resume_mode=from_path",
         f"checkpoint.resume_path={tmp_path}/global_step_5"],
        ["recipe=lora_16gpu", "cluster=probed"],  # a site profile `doctor --probe --write probed` wrote
    ]
    monkeypatch.setenv("BEAM_SLURM_CONFIG_DIR", str(tmp_path / "profiles"))
    (tmp_path / "profiles" / "cluster").mkdir(parents=True)
    (tmp_path / "profiles" / "cluster" / "probed.yaml").write_text(
        "# @package _global_\ncluster: {partition: gpu, storage_write_gbytes_per_s: 2.0}\n"
        "site: {measured: [cluster.storage_write_gbytes_per_s], measured_at: '2026-12-05T10:00:00+00:00', "
        "slurm_version: '24.11.5', signal_early_s: 20.0, requeue_hold_s: 121.0, local_write_gbytes_per_s: 3.0, "
        "queue_wait_s: 4.0}\n"
    )
    monkeypatch.setenv("FAKE_RUNTIME_LOG", str(tmp_path / "runtime.log"))
    recorder = ReadRecorder()
    for name in ("validate_config", "to_yaml"):
        monkeypatch.setattr(load_module, name, recorder.pausing(getattr(load_module, name)))
    monkeypatch.setattr("beam_slurm.jobs.training.job_settings.to_yaml", recorder.pausing(load_module.to_yaml))
    with recorder.installed():
        for variant in variants:
            overrides = base + variant
            recorder.paused += 1
            cfg = load_config(overrides, validate=False)
            recorder.paused -= 1
            _exercise(cfg, overrides, tmp_path, monkeypatch)
    unread = sorted(set(schema_keys()) - recorder.read - _ray_keys_read_on_the_nodes())
    assert not unread, f"schema keys no code reads ({len(unread)}): " + ", ".join(unread)
