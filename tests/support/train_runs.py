"""Training runs on the Slurm sandbox: the real `sbatch/train_lora_16gpu.sh` with the rehearsal trainer.

`TrainRun` holds one run's folders on shared storage (nodes have a private /tmp) and the environment a user sets
(the seed's variable names), submits the batch script the way a user does (from the run's own folder, not the
checkout, with BEAM_SLURM_HOME unset) and reads back what the run left: the job output, the per-attempt logs,
train_metrics.jsonl, the checkpoints and the rehearsal's actor placement.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ray_processes import ray_left_running

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = REPO_ROOT / "sbatch" / "train_lora_16gpu.sh"
QUICK_PREFLIGHT = ("cluster.fabric_check=false", "cluster.storage_probe_s=0")
"""Overrides of runs that do not test the fabric check or the storage probe (each has its own sandbox tests)."""
LIGHT_RAY = ("ray.include_dashboard=false",)
"""Every run here: no dashboard process on the head (nothing here reads it; tests/ray_cluster runs Ray with it).
The lanes' bring-ups share two cores: a lighter head starts sooner under that load."""
SCRIPT_GPUS_PER_NODE = 8  # the batch script's `#SBATCH --gpus-per-node`, what the sandbox's nodes have


def few_gpus(gpus_per_node: int) -> tuple[str, ...]:
    """Overrides of a run on `gpus_per_node` of each node's GPUs: the recipe's parallelism shrunk to fit (Megatron
    TP x EP and one vLLM replica per node's GPUs), so the plan stays valid; the rehearsal places an actor per GPU."""
    return (f"cluster.gpus_per_node={gpus_per_node}", f"megatron.tensor_parallel={gpus_per_node}",
            "megatron.pipeline_parallel=1", f"megatron.expert_parallel={gpus_per_node}",
            f"rollout.tensor_parallel={gpus_per_node}", "rollout.pipeline_parallel=1")


ATTEMPT_FIELDS = ("JobID", "State", "NodeList", "Start", "End")

# Environment variables the job would otherwise inherit from whoever runs the tests; the config reads them.
INHERITED_SETTINGS = ("BEAM_SLURM_HOME", "BEAM_LOG_DIR", "RESUME_MODE", "SKYRL_DIR", "OPTIMIZER_STATE_DISK_DIR",
                      "KV_CACHE_DTYPE", "BEAM_CONTAINER_IMAGE", "RUN_NAME", "BEAM_PYTHON", "PYTHONPATH")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    """Poll predicate until it returns something true; AssertionError naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class TrainRun:
    """One rehearsal training run on the sandbox, submitted through the real batch script."""

    sandbox: object
    """The `slurm_sandbox` fixture."""
    work: Path
    """The run's folder on shared storage; the job is submitted from here."""
    steps: int
    """MAX_TRAINING_STEPS."""
    ckpt_interval: int
    """CKPT_INTERVAL."""
    step_seconds: float = 1.0
    """BEAM_REHEARSAL_STEP_SECONDS."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """More environment for the job (e.g. RUN_NAME)."""
    measure_preflight: bool = False
    """Run the preflight's fabric check and storage probe (about 10 s per attempt here): on only in the tests of
    those two; the rest keep the other checks and save the time (`QUICK_PREFLIGHT`)."""
    gpus_per_node: int = 2
    """GPUs of each node the run asks for (`--gpus-per-node`, `few_gpus`): one rehearsal actor (a Ray worker
    process) per GPU, and the lanes' CPU went mostly to Ray's worker processes, so runs that are not about GPUs
    take 2 of the 8; those that are (the two-node rehearsal, the hang dumps) ask for all 8."""
    script: Path = TRAIN_SCRIPT
    """The batch script submitted (a test may submit an edited copy)."""
    job_id: str = ""
    """Set by submit()."""

    @property
    def model_path(self) -> Path:
        return self.work / "model"

    @property
    def data_dir(self) -> Path:
        return self.work / "data"

    @property
    def ckpt_path(self) -> Path:
        return self.work / "ckpt"

    @property
    def export_path(self) -> Path:
        return self.work / "export"

    def env(self) -> dict[str, str]:
        env = self.sandbox.env({
            "MODEL_PATH": str(self.model_path), "DATA_DIR": str(self.data_dir), "CKPT_PATH": str(self.ckpt_path),
            "EXPORT_PATH": str(self.export_path), "BEAM_TRAINER_BACKEND": "rehearsal",
            "MAX_TRAINING_STEPS": str(self.steps), "CKPT_INTERVAL": str(self.ckpt_interval),
            "BEAM_REHEARSAL_STEP_SECONDS": str(self.step_seconds), **self.extra_env})
        for name in INHERITED_SETTINGS:
            if name not in self.extra_env:
                env.pop(name, None)
        return env

    def submit(self, *sbatch_args: str, overrides: tuple[str, ...] = ()) -> str:
        """`sbatch [sbatch_args] <relative path to the script> [overrides]`, run from the run's folder."""
        self.model_path.mkdir(exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        script = os.path.relpath(self.script, self.work)  # as a user in their own folder would type it
        given = {o.split("=", 1)[0] for o in overrides}
        defaults = LIGHT_RAY if self.measure_preflight else (*QUICK_PREFLIGHT, *LIGHT_RAY)
        gpus: tuple[str, ...] = ()
        if self.gpus_per_node != SCRIPT_GPUS_PER_NODE:
            defaults = (*defaults, *few_gpus(self.gpus_per_node))
            gpus = (f"--gpus-per-node={self.gpus_per_node}",)
        overrides = (*[o for o in defaults if o.split("=", 1)[0] not in given], *overrides)
        proc = subprocess.run(
            ["sbatch", "--parsable", f"--output={self.work}/%x-%j.out", *gpus, *sbatch_args, script, *overrides],
            cwd=self.work, env=self.env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"sbatch failed: {proc.stderr}"
        self.job_id = proc.stdout.strip().split(";")[0]
        self.sandbox.submitted.append(self.job_id)
        return self.job_id

    # --- what the run left -------------------------------------------------------------------------------------
    def output(self) -> str:
        """The job's output file (all attempts, append mode)."""
        files = list(self.work.glob(f"*-{self.job_id}.out"))
        return files[0].read_text(errors="replace") if files else ""

    def attempt_log(self, attempt: int | str) -> str:
        """train_job.log of one attempt (<export_path>/logs/<job>-<attempt>/)."""
        path = self.export_path / "logs" / f"{self.job_id}-{attempt}" / "train_job.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def metrics(self) -> list[dict]:
        """train_metrics.jsonl, one dict per finished step in the order written."""
        path = self.export_path / "train_metrics.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def steps_by_attempt(self, in_job: bool = False) -> dict:
        """Requeue count (or, with in_job, (requeue count, in-job restart)) -> the steps that attempt logged."""
        by_attempt: dict = {}
        for record in self.metrics():
            key = (int(record["attempt"]), int(record.get("in_job", 0))) if in_job else int(record["attempt"])
            by_attempt.setdefault(key, []).append(int(record["step"]))
        return by_attempt

    def checkpoints(self) -> dict[int, dict]:
        """step -> the rehearsal's trainer_state of every complete checkpoint directory."""
        found = {}
        for state in self.ckpt_path.glob("global_step_*/trainer_state.pt"):
            found[int(state.parent.name.removeprefix("global_step_"))] = json.loads(state.read_text())
        return dict(sorted(found.items()))

    def marker(self) -> int | None:
        path = self.ckpt_path / "latest_ckpt_global_step.txt"
        return int(path.read_text().strip()) if path.exists() else None

    def resumed_from(self) -> list[int]:
        """Steps the driver said it resumed from, in order of the attempts."""
        return [int(m) for m in re.findall(r"\[rehearsal\] resumed from step (\d+) \(latest\)", self.output())]

    def wait_for_steps(self, count: int, timeout: float = 300) -> None:
        """Wait until `count` steps are logged (includes time the job spends pending on a busy sandbox)."""
        wait_for(lambda: len(self.metrics()) >= count, timeout, f"{count} steps of job {self.job_id}")

    def finish(self, timeout: float) -> str:
        """Wait for the job's final state; the job output is in the failure message."""
        try:
            return self.sandbox.wait(self.job_id, timeout=timeout)
        except TimeoutError as exc:
            self.sandbox.cancel(self.job_id)
            raise AssertionError(f"{exc}\n--- output ---\n{self.output()[-6000:]}") from None

    def ray_left_running(self, settle_s: float = 15) -> list[str]:
        """Processes still running from any of this job's Ray temp dirs on any node, after settle_s seconds."""
        return ray_left_running(self.job_id, settle_s)

    def restarts(self) -> int:
        """Restarts as `scontrol show job` reports them."""
        return int(self.sandbox.scontrol_job(self.job_id).get("Restarts", "-1"))

    def sacct_attempts(self) -> list[dict[str, str]]:
        """One allocation row per attempt (`sacct -D -X`: duplicates of the requeued job included)."""
        proc = subprocess.run(["sacct", "-D", "-X", "-n", "-P", "-j", self.job_id, "-o", ",".join(ATTEMPT_FIELDS)],
                              capture_output=True, text=True, env=self.sandbox.env(), timeout=60, check=True)
        return [dict(zip(ATTEMPT_FIELDS, line.split("|"))) for line in proc.stdout.splitlines()
                if line]

    def assert_every_step_once_after_resume(self) -> None:
        """Exactly steps 1..N in the end; an attempt starts right after the checkpoint it resumed from, and that
        checkpoint is the last one the earlier attempts saved (so no saved step is ever redone)."""
        by_attempt = self.steps_by_attempt(in_job=True)
        final: dict[int, int] = {}
        for attempt in sorted(by_attempt):
            for step in by_attempt[attempt]:
                final[step] = attempt
        assert sorted(final) == list(range(1, self.steps + 1)), by_attempt
        saved_before = 0
        for attempt in sorted(by_attempt):
            steps = by_attempt[attempt]
            assert steps == list(range(steps[0], steps[-1] + 1)), f"attempt {attempt} skipped steps: {steps}"
            assert steps[0] == saved_before + 1, (
                f"attempt {attempt} started at step {steps[0]}, but the last checkpoint before it was step "
                f"{saved_before}: {by_attempt}")
            saved_before = max(s for s, state in self.checkpoints().items()
                               if (state["attempt"], state.get("in_job", 0)) <= attempt)
