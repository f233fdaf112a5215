"""The pipeline's stages, each one `sbatch` command of its batch script and whether its work is already done:

    PrepareData   sbatch/prepare_data.sh   [--force] data.out_dir=<paths.data_dir> data.<key>=<value>...
    PullContainer sbatch/pull_container.sh container.runtime=R container.image=I container.image_cache_dir=D
    Train         sbatch/train_<recipe>.sh <overrides> run_name=.. paths.ckpt_path=.. paths.export_path=..

Evaluations are not a stage (`evaluate` and the training chain submit job arrays). Slurm options from `cfg.cluster`
override the scripts' #SBATCH headers; settings reach jobs as recipe keys, never secrets on a command line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

from beam_slurm import REPO_ROOT
from beam_slurm.config.container_runtime import cached_image_path, is_local_image
from beam_slurm.config.load import load_config, read_back_problems
from beam_slurm.config.overrides import BARE_VALUE, override
from beam_slurm.config.schema import BeamConfig
from beam_slurm.config.sources import env_sources, profile_of
from beam_slurm.core import layout
from beam_slurm.core.errors import BadDataInput, ConfigProblem, UserError
from beam_slurm.jobs.container_pull import image_is_current
from beam_slurm.jobs.data.manifest import MANIFEST_NAME, load_manifest, reuse_verdict
from beam_slurm.jobs.data.prepare import plans, reuse_request
from beam_slurm.slurm.submission import SbatchRequest, submission_token, submit, token_prefix

TRAIN_SCRIPTS = {
    "lora_16gpu": "train_lora_16gpu.sh",
    "lora_32gpu": "train_lora_32gpu.sh",
    "bf16_64gpu": "train_bf16.sh",
    "mxfp8_64gpu": "train_mxfp8.sh",
}
_MISSING = "is missing"


class StageError(UserError, ValueError):
    """A stage cannot be rendered (missing script, bad setting); reported with exit status 2 before any submission."""


def checkout_home() -> str:
    """The checkout the jobs run from: $BEAM_SLURM_HOME when set, else the one this package was imported from."""
    return os.environ.get("BEAM_SLURM_HOME") or str(REPO_ROOT)


def script_path(name: str) -> str:
    path = Path(checkout_home()) / "sbatch" / name
    if not path.is_file():
        raise StageError(f"batch script {path} is missing; set BEAM_SLURM_HOME to a complete beam-slurm checkout")
    return str(path)


def account_options(cfg: BeamConfig) -> list[str]:
    """--partition/--account/--qos from cfg.cluster (the same for every stage of a run)."""
    c = cfg.cluster
    return [
        f"{flag}={value}"
        for flag, value in (("--partition", c.partition), ("--account", c.account), ("--qos", c.qos))
        if value
    ]


def gpu_job_options(cfg: BeamConfig, nodes: int, time_limit: str) -> list[str]:
    """Resources of a GPU job (training, evaluation): nodes, GPUs, memory, CPUs, time, then the user's extras."""
    c = cfg.cluster
    out = [f"--nodes={nodes}", f"--gpus-per-node={c.gpus_per_node}", f"--time={time_limit}"]
    out += [f"--cpus-per-task={c.cpus_per_node}"] if c.cpus_per_node else []
    out += [f"--mem={c.mem_per_node}"] if c.mem_per_node else []
    out += [f"--constraint={c.constraint}"] if c.constraint else []
    return out + account_options(cfg) + [str(a) for a in c.extra_sbatch_args]


StageStatus = Literal["submitted", "reused", "skipped", "not-queued", "pending-submit"]


class StageJson(TypedDict):
    """One stage of one run as `submit` left it (the run record keeps the same as its stage entry)."""

    stage: str  # data, container or train
    status: StageStatus  # not-queued: `reason` says why; pending-submit: a dry run's stage that would be submitted
    job_id: str | None  # as `sbatch --parsable` prints it; null when the stage has no job
    reason: str | None  # why nothing was queued for it (complete, already queued, refused, ...)
    identity: str  # what the stage produces: sweep points with the same identity share one job
    depends_on: list[str]  # the job ids it waits for
    command: str | None  # the sbatch command line; null for a skipped stage
    token: str | None  # the submission token in the job's --comment (squeue finds the job by it)


@dataclass
class StagePlan:
    """One stage of one run, rendered: what would be submitted, or why nothing needs to be."""

    stage: str  # data, container, train or evaluate
    identity: str  # what the stage produces: runs of a sweep with the same identity share one job
    request: SbatchRequest | None  # The sbatch call; None when the stage is skipped
    skip_reason: str = ""  # why nothing is submitted (complete, not needed, already queued)
    reused_job_id: str = ""  # An earlier submission's job that is still queued or running and produces the same thing
    reused_state: str = ""  # That job's state (PENDING, RUNNING, ...)
    job_id: str = ""  # Filled once submitted (or with reused_job_id)
    depends_on: list[str] = field(default_factory=list)  # Job ids this stage waited for when it was submitted
    log_dir: str = ""  # Where the job's output goes; created just before submission
    owner: str = ""  # The run (sweep point) whose submission token this stage's job carries
    not_queued: str = ""  # Why this call queued nothing for the stage (Slurm refused, no answer, a stage before)
    notes: list[str] = field(default_factory=list)  # What the submission said on the way (a lost answer, adopted)

    def __post_init__(self) -> None:
        if self.request is not None and not self.request.token:
            self.request.token = submission_token(self.owner or self.stage, self.stage, self.identity)

    @property
    def token(self) -> str:
        """The submission token in the job's --comment ('' for a stage without a job)."""
        return self.request.token if self.request is not None else ""

    @property
    def token_prefix(self) -> str:
        """What the token of every submission of this stage of its run, for the same output, starts with (squeue
        finds them by it)."""
        return token_prefix(self.owner or self.stage, self.stage, self.identity)

    @property
    def status(self) -> StageStatus:
        if self.job_id:
            return "reused" if self.job_id == self.reused_job_id else "submitted"
        if self.not_queued:
            return "not-queued"
        return "skipped" if self.skip_reason else "pending-submit"

    def submit(self, depends_on: list[str], dependency_type: str, notify=None) -> str:
        """Submit (creating the log folder first) and return the job id; a lost answer is settled by its token, what
        that said goes to `notes` (and to `notify`)."""
        assert self.request is not None
        self.request.dependency_ids = list(depends_on)
        self.request.dependency_type = dependency_type
        if self.log_dir:
            Path(self.log_dir).mkdir(parents=True, exist_ok=True)
        self.depends_on = list(depends_on)

        def say(line: str) -> None:
            self.notes.append(line)
            if notify is not None:
                notify(line)

        self.job_id = submit(self.request, notify=say)
        return self.job_id

    def to_json(self) -> StageJson:
        return {
            "stage": self.stage,
            "status": self.status,
            "job_id": self.job_id or None,
            "reason": self.not_queued or self.skip_reason or None,
            "identity": self.identity,
            "depends_on": self.depends_on,
            "command": self.request.shell() if self.request is not None else None,
            "token": self.token or None,
        }


def _service_plan(stage: PrepareData | PullContainer, script_args: list[str]) -> StagePlan:
    """The plan of a one-task stage (data, container): its own log and job name, no GPUs."""
    cfg, log_dir = stage.cfg, str(stage.cfg.paths.log_dir)
    request = SbatchRequest(
        script=script_path(stage.script),
        options=[
            f"--job-name={cfg.run_name}-{stage.stage}",
            f"--output={log_dir}/{stage.stage}-%j.out",
            *account_options(cfg),
        ],
        script_args=script_args,
        export={"BEAM_SLURM_HOME": checkout_home()},
    )
    return StagePlan(stage.stage, stage.identity(), request, log_dir=log_dir, owner=str(cfg.run_name))


class PrepareData:
    """Builds the cleaned parquet files into paths.data_dir; done when every output matches its manifest entry."""

    stage = "data"
    script = "prepare_data.sh"

    def __init__(self, cfg: BeamConfig, data_overrides: list[str], *, force: bool = False):
        self.cfg = cfg
        self.force = force
        self.data_overrides = list(data_overrides)

    @property
    def out_dir(self) -> str:
        return str(self.cfg.paths.data_dir)

    def identity(self) -> str:
        return "data:" + self.out_dir + " " + " ".join(sorted(self.data_overrides)) + (" --force" if self.force else "")

    def _verdicts(self) -> dict[str, str | None] | None:
        """Each output's reuse verdict (None: it can be kept; _MISSING: not there yet); None when a source moved."""
        config = load_config([*self.data_overrides, override("data.out_dir", self.out_dir)], validate=False).data
        out_dir = Path(self.out_dir)
        manifest = load_manifest(out_dir)
        found: dict[str, str | None] = {}
        for plan in plans(config):
            output = out_dir / plan.file_name
            if not output.is_file():
                found[plan.file_name] = _MISSING
                continue
            try:
                request = reuse_request(plan)
            except BadDataInput:
                return None  # a source moved: let the job say so
            found[plan.file_name] = reuse_verdict(output, manifest.get(plan.file_name), request)
        return found

    def completed(self) -> str:
        """Why the outputs can be kept as they are, or '' when the job must run."""
        if self.force:
            return ""
        verdicts = self._verdicts()
        if not verdicts or any(v is not None for v in verdicts.values()):
            return ""
        return f"complete: the three files in {self.out_dir} match {MANIFEST_NAME}"

    def blocked(self) -> str:
        """Why the data job would refuse to run, or '': refused now, no training job waits on it for ever."""
        if self.force:
            return ""
        refused = {name: why for name, why in (self._verdicts() or {}).items() if why not in (None, _MISSING)}
        if not refused:
            return ""
        listed = "; ".join(f"{Path(self.out_dir) / name} {why}" for name, why in sorted(refused.items()))
        return (
            f"the data job would refuse to overwrite: {listed}. Choose: adopt them (beam-slurm prepare-data "
            f"--adopt data.out_dir={self.out_dir} checks their schema and rows and records them), skip the data "
            "stage (--stages container,train), or rebuild them (submit --force)"
        )

    def render(self) -> StagePlan:
        return _service_plan(
            self, [*(["--force"] if self.force else []), override("data.out_dir", self.out_dir), *self.data_overrides]
        )


class PullContainer:
    """Imports the image once into container.image_cache_dir; not needed for runtime none or a local image file."""

    stage = "container"
    script = "pull_container.sh"

    def __init__(self, cfg: BeamConfig):
        self.cfg = cfg
        self.settings = cfg.container

    def identity(self) -> str:
        s = self.settings
        return f"container:{s.runtime} {s.image} {s.image_cache_dir}"

    def completed(self) -> str:
        s = self.settings
        if s.runtime == "none":
            return "not needed: container.runtime=none runs on the host"
        if not s.image:
            return "not needed: no container.image"
        if is_local_image(s.image):
            return f"not needed: container.image is the local file {s.image}"
        if not s.image_cache_dir:
            return "not needed: no container.image_cache_dir, so each node pulls at job start"
        if image_is_current(s):
            return f"complete: {cached_image_path(s)} matches its digest record"
        return ""

    def render(self) -> StagePlan:
        s = self.settings
        return _service_plan(
            self,
            [
                override("container.runtime", s.runtime),
                override("container.image", s.image),
                override("container.image_cache_dir", s.image_cache_dir),
            ],
        )


class Train:
    """The training job (`sbatch/train_<recipe>.sh`); done when the latest checkpoint is the last step."""

    stage = "train"

    def __init__(self, cfg: BeamConfig, overrides: list[str]):
        self.cfg = cfg
        self.overrides = list(overrides)

    def identity(self) -> str:
        return f"train:{self.cfg.paths.ckpt_path}"

    def completed(self) -> str:
        assert self.cfg.paths.ckpt_path is not None  # fill_defaults sets it
        step = layout.latest_checkpoint_step(self.cfg.paths.ckpt_path)
        if step is not None and step >= self.cfg.max_training_steps:
            marker = f"{self.cfg.paths.ckpt_path}/{layout.CHECKPOINT_MARKER}"
            return f"complete: {marker} is step {step} of {self.cfg.max_training_steps}"
        return ""

    def script_args(self) -> list[str]:
        """The run's overrides, with the names and paths pinned so the job resolves exactly this run."""
        pinned = self.pinned()
        # The script fixes recipe=..., and the pinned keys come last so they win.
        kept = [o for o in self.overrides if o.split("=", 1)[0].lstrip("+~") not in {"recipe", *pinned}]
        profile = profile_of(self.cfg)
        if profile is not None and not any(o.split("=", 1)[0].lstrip("+") == "cluster" for o in kept):
            kept.append(f"cluster={profile.name}")  # chosen by BEAM_SLURM_CLUSTER here: the job may not inherit it
        # Rendered for Hydra's grammar: a quote, comma or space in a path stays part of it.
        return kept + [override(k, v) for k, v in pinned.items()]

    def pinned(self) -> dict[str, object]:
        cfg = self.cfg
        return {
            "run_name": cfg.run_name,
            "paths.ckpt_path": cfg.paths.ckpt_path,
            "paths.export_path": cfg.paths.export_path,
            "paths.log_dir": cfg.paths.log_dir,
        }

    def passing_on_problems(self) -> list[ConfigProblem]:
        """What the job's own parser would not read back of its arguments (`read_back_problems`); checked only where
        a value needs quoting, since a plain word always reads back."""
        pinned = self.pinned()
        if all(isinstance(v, str) and BARE_VALUE.match(v) for v in pinned.values()):
            return []
        return read_back_problems([f"recipe={self.cfg.recipe}", *self.script_args()], pinned, env_sources(self.cfg))

    def render(self) -> StagePlan:
        cfg = self.cfg
        script = TRAIN_SCRIPTS.get(cfg.recipe)
        if script is None:
            raise StageError(f"recipe={cfg.recipe!r} has no batch script; use one of {', '.join(TRAIN_SCRIPTS)}")
        c = cfg.cluster
        assert c.time_limit is not None  # fill_defaults puts the schema's default back
        options = [
            f"--job-name={cfg.run_name}",
            f"--output={cfg.paths.log_dir}/train-%j.out",
            f"--signal=B:USR1@{c.signal_before_s}",
        ]
        options += gpu_job_options(cfg, c.nodes + c.spare_nodes, c.time_limit)  # spares are in the allocation
        request = SbatchRequest(
            script=script_path(script),
            options=options,
            script_args=self.script_args(),
            export={"BEAM_SLURM_HOME": checkout_home()},
        )
        return StagePlan(self.stage, self.identity(), request, log_dir=str(cfg.paths.log_dir), owner=str(cfg.run_name))
