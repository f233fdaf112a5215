"""One attempt of the training job, in the batch shell: preflight on every node, the Ray step in the background
(one `srun` over all nodes, `python -m beam_slurm.ray_cluster.node -- DRIVER...`, the driver on the head), then
waiting. A notice - the pre-timeout signal (`#SBATCH --signal=B:USR1@N`, delivered to this shell only) or SIGTERM
(preemption) - starts the save sequence:

1. `notice.request_save(ckpt_path)`: the trainer saves at the next step boundary and acknowledges;
2. wait up to `grace_s` for `notice.saved_since(...)` (or for the run to finish on its own);
3. stop the Ray step (SIGTERM through Slurm to every node: driver stopped, each node's Ray stopped).

The attempt's facts then go to `requeue_policy.decide`, whose decision this module carries out (`scontrol requeue`
or the exit status). Logs: `<log_dir>/<jobid>-<attempt>/` on shared storage (train_job.log, ray-<host>.log,
failure.json, ...).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from beam_slurm.ray_cluster import auth, records
from beam_slurm.ray_cluster.ports import ephemeral_range
from beam_slurm.ray_cluster.settings import SETTINGS_ENV
from beam_slurm.slurm import preflight, scheduler
from beam_slurm.slurm.job_settings import TrainJobSettings
from beam_slurm.slurm.requeue_policy import AttemptFacts, Decision, decide, stop_waiting_for_save
from beam_slurm.slurm.steps import StepLauncher, stop_step

RAY_STEP = "ray"
"""Job name of the Ray step (how `scontrol` finds it to signal it)."""
_POLL_S = 0.2
_SAVE_POLL_S = 0.5


class Attempt:
    """One attempt of the training job, run in the batch shell."""

    def __init__(self, settings: TrainJobSettings, allocation: scheduler.AllocationInfo):
        self.settings = settings
        self.alloc = allocation
        self.attempt_dir = Path(settings.log_dir) / f"{allocation.job_id}-{allocation.restart_count}"
        self.notices: list[tuple[str, float]] = []
        self.step: subprocess.Popen | None = None
        self.nodes = settings.nodes
        hook = settings.container
        hook = hook(allocation.job_id) if callable(hook) else hook
        self.launcher = StepLauncher(hook=hook, python=settings.python, nodes=self.nodes,
                                     gpus_per_node=settings.gpus_per_node, cpus_per_task=allocation.cpus_on_node)
        self._log_file = None
        self.requeued = False
        """True once this attempt asked Slurm to requeue the job (the job folder and token are then kept)."""

    # --- logging -------------------------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        line = (f"[beam-slurm train {time.strftime('%H:%M:%S')} job {self.alloc.job_id} "
                f"attempt {self.alloc.restart_count}] {message}")
        print(line, file=sys.stderr, flush=True)
        if self._log_file is not None:
            self._log_file.write(line + "\n")
            self._log_file.flush()

    # --- environment and signals ---------------------------------------------------------------------------------
    def step_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.launcher.hook.env)
        env[SETTINGS_ENV] = self.settings.ray.to_env()
        env["BEAM_ATTEMPT_DIR"] = str(self.attempt_dir)
        env["BEAM_GPUS_PER_NODE"] = str(self.settings.gpus_per_node)
        env.setdefault("BEAM_JOB_START_TIME", str(time.time()))
        if self.alloc.restart_count > 0:
            # A requeued attempt continues from the last complete checkpoint.
            env["RESUME_MODE"] = "latest"
        return env

    def install_signal_handlers(self) -> None:
        def on_notice(signum: int, _frame: Any) -> None:
            self.notices.append((signal.Signals(signum).name, time.time()))

        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_notice)

    # --- phases --------------------------------------------------------------------------------------------------
    def run_preflight(self, env: dict[str, str]) -> bool:
        canary = self.attempt_dir / "shared-storage-canary"
        canary.write_text(f"{self.alloc.job_id}\n")
        checks = dataclasses.replace(self.settings.preflight_checks, gpus_per_node=self.settings.gpus_per_node,
                                     shared_canary=str(canary))
        # srun places a step on fewer nodes than the allocation as it likes: then only the count can be checked.
        hosts = self.alloc.nodes if self.nodes == len(self.alloc.nodes) else []
        return preflight.run_step(self.launcher, checks, hosts, env, self.attempt_dir, self.log)

    def start_ray_step(self, env: dict[str, str]) -> None:
        argv = self.launcher.module_argv(["beam_slurm.ray_cluster.node", "--", *self.settings.driver],
                                         kill_on_bad_exit=True, name=RAY_STEP)
        self.log(f"starting the Ray step on {self.nodes} nodes: "
                 f"{shlex.join(argv[: argv.index(self.settings.python)])} ...")
        # Own process group: a SIGINT typed at an interactive salloc shell must reach us, not srun directly.
        self.step = subprocess.Popen(argv, env=env, start_new_session=True)

    def stop_ray_step(self) -> int:
        assert self.step is not None
        return stop_step(self.step, self.alloc.job_id, RAY_STEP, self.settings.stop_grace_s, self.log, label="Ray")

    def wait_step(self) -> AttemptFacts:
        """Wait for the Ray step, handling a notice; what happened."""
        assert self.step is not None
        while True:
            if self.notices:
                return self.handle_notice()
            status = self.step.poll()
            if status is not None:
                self.log_step_end(status)
                return self.facts(step_status=status)
            time.sleep(_POLL_S)

    def handle_notice(self) -> AttemptFacts:
        from beam_slurm.skyrl import notice

        assert self.step is not None
        name, received = self.notices[0]
        self.log(f"notice {name} received: asking the trainer to save a checkpoint (grace {self.settings.grace_s:.0f}s)")
        notice.request_save(self.settings.ckpt_path, f"{name} (time limit or preemption)")
        while True:
            saved = notice.saved_since(self.settings.ckpt_path, received)
            why = stop_waiting_for_save(now=time.time(), received=received, grace_s=self.settings.grace_s,
                                        saved_step=saved, step_running=self.step.poll() is None,
                                        notices=len(self.notices))
            if why is not None:
                break
            time.sleep(_SAVE_POLL_S)
        if saved is None:  # a save acknowledged as the step ended or the grace ran out still counts
            saved = notice.saved_since(self.settings.ckpt_path, received)
        if why == "second notice":
            self.log(f"second notice {self.notices[-1][0]}: stopping without waiting for the save")
        if saved is not None:
            self.log(f"checkpoint of step {saved} saved on notice after {time.time() - received:.1f}s")
        elif self.step.poll() is None:
            self.log("no checkpoint saved on notice within the grace period; the next attempt resumes from the last "
                     "periodic checkpoint")
        status = self.stop_ray_step()
        return self.facts(notice=name, saved_step=saved, step_status=status)

    def log_step_end(self, status: int) -> None:
        """Say why the Ray step ended on its own, when it failed: the first failure a node recorded."""
        if status == 0:
            return
        failure = records.read_failure(self.attempt_dir)
        if failure:
            self.log(f"{failure.get('kind')} failure on {failure.get('node')}: {failure.get('reason')}")
        else:
            self.log(f"the Ray step ended with status {status} "
                     f"(driver status {records.read_driver_status(self.attempt_dir)})")

    def facts(self, **seen: Any) -> AttemptFacts:
        """This attempt's facts: what the caller saw plus what the nodes recorded in the attempt folder."""
        failure = records.read_failure(self.attempt_dir)
        return AttemptFacts(restart_count=self.alloc.restart_count, max_requeues=self.settings.max_requeues,
                            driver_status=records.read_driver_status(self.attempt_dir),
                            failure_kind=failure.get("kind") if failure else None, **seen)

    def carry_out(self, decision: Decision) -> int:
        """Requeue or end as decided; the batch shell's exit status."""
        if not decision.requeue:
            self.log(f"{decision.reason}: {decision.note}" if decision.note else decision.reason)
            return decision.exit_status
        try:
            scheduler.requeue(self.alloc.job_id)
        except scheduler.SlurmCommandError as exc:
            self.log(f"{decision.reason}: requeue failed: {exc} (is the job submitted with --requeue?)")
            return decision.exit_status
        self.requeued = True
        self.log(f"{decision.reason}: job requeued (attempt {self.alloc.restart_count + 1} of at most "
                 f"{self.settings.max_requeues + 1} will resume from the latest checkpoint)")
        return 0

    # --- entry ---------------------------------------------------------------------------------------------------
    def run(self) -> int:
        self.install_signal_handlers()
        self.attempt_dir.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.attempt_dir / "train_job.log", "a")
        from beam_slurm.skyrl import notice

        try:
            self.log(f"{self.nodes} nodes ({','.join(self.alloc.nodes[: self.nodes])}), "
                     f"{self.settings.gpus_per_node} GPUs per node, logs in {self.attempt_dir}")
            self.warn_port_range()
            notice.clear(self.settings.ckpt_path)
            if self.settings.ray.auth:
                auth.ensure_token(self.settings.ray, self.alloc.job_id)
            env = self.step_env()
            if self.settings.preflight and not self.run_preflight(env):
                return self.carry_out(decide(self.facts(preflight_failed=True, ray_started=False)))
            if self.notices:
                return self.carry_out(decide(self.facts(notice=self.notices[0][0], ray_started=False)))
            self.start_ray_step(env)
            return self.carry_out(decide(self.wait_step()))
        finally:
            if self.step is not None and self.step.poll() is None:
                self.stop_ray_step()
            if not self.requeued:
                auth.remove_job_dir(self.settings.ray, self.alloc.job_id)
            self._log_file.close()

    def warn_port_range(self) -> None:
        ephemeral = ephemeral_range()
        ray = self.settings.ray
        if ephemeral and ray.port_range_start <= ephemeral[1] and ray.port_range_end > ephemeral[0]:
            self.log(f"warning: ray.port_range {ray.port_range_start}-{ray.port_range_end} overlaps this host's "
                     f"ephemeral ports {ephemeral[0]}-{ephemeral[1]}; Ray may race outgoing connections for ports")
