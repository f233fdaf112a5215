"""`beam-slurm train`: what the batch shell of `sbatch/train_*.sh` runs inside the allocation.

In order: a preflight step on every node (skippable); the Ray step in the background (one `srun` over all nodes,
`python -m beam_slurm.ray_cluster.node -- DRIVER...`, the driver on the head); then it waits. The driver's exit status
becomes the job's. A notice - the pre-timeout signal (`#SBATCH --signal=B:USR1@N`, delivered to this shell only) or
SIGTERM (preemption) - starts the save-and-requeue sequence:

1. `notice.request_save(ckpt_path)`: the trainer saves at the next step boundary and acknowledges;
2. wait up to `grace_s` for `notice.saved_since(...)` (or for the run to finish on its own);
3. stop the Ray step (SIGTERM to srun, which forwards it to every node: driver stopped, each node's Ray stopped);
4. `scontrol requeue $SLURM_JOB_ID` unless the run finished or SLURM_RESTART_COUNT reached `max_requeues`.

An infrastructure failure (a node's Ray died, a node never joined) is also requeued within the cap; a driver error is
not. The requeued attempt starts this script again with SLURM_RESTART_COUNT+1 and gives the driver RESUME_MODE=latest.
Logs: `<log_dir>/<jobid>-<attempt>/` on shared storage (train_job.log, ray-<host>.log, failure.json, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from beam_slurm.config.errors import ConfigError, ConfigProblem
from beam_slurm.ray_cluster import auth
from beam_slurm.ray_cluster.node import DRIVER_EXIT_FILE, EXIT_INFRA, FAILURE_FILE
from beam_slurm.ray_cluster.ports import ephemeral_range
from beam_slurm.ray_cluster.settings import SETTINGS_ENV, RaySettings
from beam_slurm.slurm import scheduler
from beam_slurm.slurm.preflight import RESULT_PREFIX, PreflightSettings, collect_results

EXIT_PREFLIGHT = 3
"""Preflight found a problem on some node; nothing was started."""
EXIT_NOT_REQUEUED = 75
"""Stopped on a notice or by an infrastructure failure, and not requeued (cap reached or requeue failed)."""


@dataclass
class ContainerHook:
    """How each srun step is containerised: options for srun and a prefix for the task's command."""

    srun_args: list[str] = field(default_factory=list)
    """Added to every srun (pyxis: --container-image, --container-mounts, ...)."""
    command_prefix: list[str] = field(default_factory=list)
    """Put before the task's command (Apptainer: apptainer exec --nv ... IMAGE)."""
    env: dict[str, str] = field(default_factory=dict)
    """Added to the environment srun starts with (Apptainer: APPTAINERENV_*)."""


def container_hook(container_settings: Any, mounts: list[Any], job_id: str) -> ContainerHook:
    """The hook for a `beam_slurm.containers.settings.ContainerSettings` (runtime none/pyxis/apptainer)."""
    if container_settings is None or getattr(container_settings, "runtime", "none") == "none":
        return ContainerHook()
    from beam_slurm.containers import runtime

    return ContainerHook(
        srun_args=runtime.srun_container_args(container_settings, mounts,
                                              container_name=runtime.default_container_name(job_id)),
        command_prefix=runtime.command_prefix(container_settings, mounts),
        env=runtime.container_environment(container_settings, os.environ),
    )


@dataclass
class TrainJobSettings:
    """Everything `beam-slurm train` needs besides Slurm's own environment."""

    driver: list[str]
    """The driver's argv, run on the Ray head once every node and GPU registered (e.g. the SkyRL command line)."""
    ckpt_path: str
    """SkyRL's trainer.ckpt_path on shared storage; the save-on-notice files live in <ckpt_path>/.beam/."""
    log_dir: str
    """Shared folder for per-attempt logs: <log_dir>/<jobid>-<attempt>/."""
    nodes: int = 0
    """Nodes of the Ray step. 0: all nodes of the allocation (SLURM_JOB_NUM_NODES)."""
    gpus_per_node: int = 8
    """GPUs every node must show (checked by preflight and by Ray's registration). 0 for CPU-only runs."""
    max_requeues: int = 3
    """Requeues allowed for this job (notices and infrastructure failures); compared with SLURM_RESTART_COUNT."""
    grace_s: float = 240.0
    """After a notice, how long to wait for the trainer's checkpoint before stopping anyway. Keep it below the
    --signal lead time (B:USR1@N, which Slurm may send up to 60 s late) minus stop_grace_s."""
    stop_grace_s: float = 45.0
    """After SIGTERM to the Ray step, how long before srun is killed."""
    requeue_on_failure: bool = True
    """Requeue (within max_requeues) when the step failed for infrastructure reasons (a node's Ray died, a node
    never joined). A failing driver is never requeued: the same error would come back."""
    preflight: bool = True
    """Run the preflight step on every node before Ray starts."""
    preflight_timeout_s: float = 300.0
    """Deadline of the preflight step; nodes that have not reported by then fail it (a hung mount, a stuck node)."""
    preflight_checks: PreflightSettings = field(default_factory=PreflightSettings)
    """What preflight checks (paths, SkyRL checkout, scratch, RAM, checkpoint storage). gpus_per_node and the
    shared-storage canary are filled in from this object."""
    container: ContainerHook | Callable[[str], ContainerHook] = field(default_factory=ContainerHook)
    """Container wrapping of every step: a ContainerHook, or a callable job_id -> ContainerHook (see
    `container_hook`). Default: none (host)."""
    ray: RaySettings = field(default_factory=RaySettings)
    """Ray cluster settings, passed to every node as BEAM_RAY_SETTINGS."""
    python: str = sys.executable
    """Interpreter that runs beam_slurm on the nodes (inside the container, the container's)."""

    def problems(self) -> list[ConfigProblem]:
        found = list(self.ray.problems())
        if not self.driver:
            found.append(ConfigProblem("train.driver", self.driver, "give the driver command after `--`"))
        if not self.ckpt_path or not os.path.isabs(self.ckpt_path):
            found.append(ConfigProblem("train.ckpt_path", self.ckpt_path, "set CKPT_PATH to an absolute path on shared storage"))
        if not self.log_dir or not os.path.isabs(self.log_dir):
            found.append(ConfigProblem("train.log_dir", self.log_dir, "use an absolute path on shared storage"))
        if self.nodes < 0:
            found.append(ConfigProblem("train.nodes", self.nodes, "use 0 (the whole allocation) or a node count"))
        if self.gpus_per_node < 0:
            found.append(ConfigProblem("train.gpus_per_node", self.gpus_per_node, "use 0 or a GPU count"))
        if self.max_requeues < 0:
            found.append(ConfigProblem("train.max_requeues", self.max_requeues, "use 0 (never requeue) or more"))
        if self.grace_s < 0 or self.stop_grace_s < 0:
            found.append(ConfigProblem("train.grace_s/stop_grace_s", (self.grace_s, self.stop_grace_s), "use seconds >= 0"))
        return found


class TrainJob:
    """One attempt of the training job, run in the batch shell."""

    def __init__(self, settings: TrainJobSettings, allocation: scheduler.AllocationInfo):
        self.settings = settings
        self.alloc = allocation
        self.attempt_dir = Path(settings.log_dir) / f"{allocation.job_id}-{allocation.restart_count}"
        self.notices: list[tuple[str, float]] = []
        self.step: subprocess.Popen | None = None
        self.nodes = settings.nodes or len(allocation.nodes)
        hook = settings.container
        self.hook = hook(allocation.job_id) if callable(hook) else hook
        self._log_file = None
        self.requeued = False
        """True once this attempt asked Slurm to requeue the job (the job folder and token are then kept)."""

    # --- logging -------------------------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        line = f"[beam-slurm train {time.strftime('%H:%M:%S')} job {self.alloc.job_id} attempt {self.alloc.restart_count}] {message}"
        print(line, file=sys.stderr, flush=True)
        if self._log_file is not None:
            self._log_file.write(line + "\n")
            self._log_file.flush()

    # --- environment and commands --------------------------------------------------------------------------------
    def step_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.hook.env)
        env[SETTINGS_ENV] = self.settings.ray.to_env()
        env["BEAM_ATTEMPT_DIR"] = str(self.attempt_dir)
        env["BEAM_GPUS_PER_NODE"] = str(self.settings.gpus_per_node)
        env.setdefault("BEAM_JOB_START_TIME", str(time.time()))
        if self.alloc.restart_count > 0:
            # A requeued attempt continues from the last complete checkpoint.
            env["RESUME_MODE"] = "latest"
        return env

    def srun(self, module_argv: list[str], kill_on_bad_exit: bool, name: str) -> list[str]:
        command = [*self.hook.command_prefix, self.settings.python, "-m", *module_argv]
        return scheduler.srun_per_node(self.nodes, command, cpus_per_task=self.alloc.cpus_on_node,
                                       gpus_per_node=self.settings.gpus_per_node, kill_on_bad_exit=kill_on_bad_exit,
                                       job_name=name, extra_args=self.hook.srun_args)

    # --- signals -------------------------------------------------------------------------------------------------
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
        argv = self.srun(["beam_slurm.slurm.preflight", checks.to_json()], kill_on_bad_exit=False, name="preflight")
        started = time.time()
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                                  timeout=self.settings.preflight_timeout_s)
            stdout, stderr = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            # A hung file system check is itself the finding: the nodes that did not answer are named below.
            stdout = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = f"preflight timed out after {self.settings.preflight_timeout_s:.0f}s\n"
        # srun places a step on fewer nodes than the allocation as it likes: then only the count can be checked.
        hosts = self.alloc.nodes if self.nodes == len(self.alloc.nodes) else []
        failures = collect_results(stdout, hosts)
        reported = stdout.count(RESULT_PREFIX)
        if not hosts and reported < self.nodes:
            failures["(unnamed)"] = [f"only {reported} of {self.nodes} nodes reported"]
        if stderr.strip():
            (self.attempt_dir / "preflight.stderr").write_text(stderr)
        if failures:
            for host, problems in sorted(failures.items()):
                for problem in problems:
                    self.log(f"preflight FAILED on {host}: {problem}")
            return False
        self.log(f"preflight passed on {self.nodes} nodes in {time.time() - started:.1f}s")
        return True

    def start_ray_step(self, env: dict[str, str]) -> None:
        argv = self.srun(["beam_slurm.ray_cluster.node", "--", *self.settings.driver], kill_on_bad_exit=True, name="ray")
        self.log(f"starting the Ray step on {self.nodes} nodes: {shlex.join(argv[: argv.index(self.settings.python)])} ...")
        # Own process group: a SIGINT typed at an interactive salloc shell must reach us, not srun directly.
        self.step = subprocess.Popen(argv, env=env, start_new_session=True)

    def stop_step(self) -> int:
        """SIGTERM every task of the Ray step (each node then stops its driver and its Ray), wait stop_grace_s,
        then make srun end the step (Slurm's SIGTERM/SIGKILL); srun's status."""
        assert self.step is not None
        if self.step.poll() is not None:
            return self.step.returncode
        self.log("stopping the Ray step")
        try:
            # Through Slurm rather than srun's own SIGTERM handling, which kills the tasks at once.
            for step_id in scheduler.step_ids(self.alloc.job_id, "ray"):
                scheduler.signal_step(step_id, "TERM")
        except scheduler.SlurmCommandError as exc:
            self.log(f"could not signal the Ray step through Slurm ({exc}); terminating srun")
            self.step.send_signal(signal.SIGTERM)
        try:
            return self.step.wait(timeout=self.settings.stop_grace_s)
        except subprocess.TimeoutExpired:
            self.log(f"the Ray step did not stop within {self.settings.stop_grace_s:.0f}s; ending it")
        self.step.send_signal(signal.SIGTERM)
        try:
            return self.step.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.step.kill()
            return self.step.wait()

    def wait_step(self) -> int:
        """Wait for the Ray step, handling notices; the attempt's exit status."""
        assert self.step is not None
        while True:
            if self.notices:
                return self.handle_notice()
            status = self.step.poll()
            if status is not None:
                return self.after_step(status)
            time.sleep(0.2)

    def handle_notice(self) -> int:
        from beam_slurm.skyrl import notice

        name, received = self.notices[0]
        reason = f"{name} (time limit or preemption)"
        self.log(f"notice {name} received: asking the trainer to save a checkpoint (grace {self.settings.grace_s:.0f}s)")
        notice.request_save(self.settings.ckpt_path, reason)
        deadline = received + self.settings.grace_s
        saved: int | None = None
        assert self.step is not None
        while time.time() < deadline and self.step.poll() is None:
            saved = notice.saved_since(self.settings.ckpt_path, received)
            if saved is not None:
                break
            if len(self.notices) > 1:
                self.log(f"second notice {self.notices[-1][0]}: stopping without waiting for the save")
                break
            time.sleep(0.5)
        if saved is None:
            saved = notice.saved_since(self.settings.ckpt_path, received)
        if saved is not None:
            self.log(f"checkpoint of step {saved} saved on notice after {time.time() - received:.1f}s")
        elif self.step.poll() is None:
            self.log("no checkpoint saved on notice within the grace period; the next attempt resumes from the last "
                     "periodic checkpoint")
        status = self.stop_step()
        if saved is None and status == 0 and self.driver_status() == 0:
            self.log("the run finished during the notice; not requeueing")
            return 0
        return self.requeue_or_exit(f"notice {name}", EXIT_NOT_REQUEUED)

    def driver_status(self) -> int | None:
        record = _read_json(self.attempt_dir / DRIVER_EXIT_FILE)
        return int(record["status"]) if record else None

    def after_step(self, status: int) -> int:
        driver_status = self.driver_status()
        if status == 0:
            self.log("the driver finished successfully")
            return 0
        failure = _read_json(self.attempt_dir / FAILURE_FILE)
        if failure:
            self.log(f"{failure.get('kind')} failure on {failure.get('node')}: {failure.get('reason')}")
        else:
            self.log(f"the Ray step ended with status {status} (driver status {driver_status})")
        infra = failure is not None and failure.get("kind") == "infra"
        if infra and self.settings.requeue_on_failure:
            return self.requeue_or_exit("infrastructure failure", status if status else EXIT_INFRA)
        return driver_status if driver_status not in (None, 0) else (status or 1)

    def requeue_or_exit(self, why: str, status_if_not: int) -> int:
        if self.alloc.restart_count >= self.settings.max_requeues:
            self.log(f"{why}: not requeueing, SLURM_RESTART_COUNT={self.alloc.restart_count} reached "
                     f"max_requeues={self.settings.max_requeues}")
            return status_if_not
        try:
            scheduler.requeue(self.alloc.job_id)
            self.requeued = True
        except scheduler.SlurmCommandError as exc:
            self.log(f"{why}: requeue failed: {exc} (is the job submitted with --requeue?)")
            return status_if_not
        self.log(f"{why}: job requeued (attempt {self.alloc.restart_count + 1} of at most {self.settings.max_requeues + 1} "
                 "will resume from the latest checkpoint)")
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
                return EXIT_PREFLIGHT
            if self.notices:
                return self.requeue_or_exit(f"notice {self.notices[0][0]} before Ray started", EXIT_NOT_REQUEUED)
            self.start_ray_step(env)
            return self.wait_step()
        finally:
            if self.step is not None and self.step.poll() is None:
                self.stop_step()
            if not self.requeued:
                auth.remove_job_dir(self.settings.ray, self.alloc.job_id)
            self._log_file.close()

    def warn_port_range(self) -> None:
        ephemeral = ephemeral_range()
        ray = self.settings.ray
        if ephemeral and ray.port_range_start <= ephemeral[1] and ray.port_range_end > ephemeral[0]:
            self.log(f"warning: ray.port_range {ray.port_range_start}-{ray.port_range_end} overlaps this host's "
                     f"ephemeral ports {ephemeral[0]}-{ephemeral[1]}; Ray may race outgoing connections for ports")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def run(settings: TrainJobSettings) -> int:
    """Validate, then run this attempt inside the current allocation; the job's exit status."""
    problems = settings.problems()
    if problems:
        ConfigError(problems).report()
        return 2
    try:
        allocation = scheduler.allocation_from_env()
    except scheduler.SlurmCommandError as exc:
        print(f"beam-slurm train: {exc}", file=sys.stderr)
        return 2
    if settings.nodes > len(allocation.nodes):
        ConfigError([ConfigProblem("train.nodes", settings.nodes,
                                   f"the allocation has {len(allocation.nodes)} nodes; submit with --nodes={settings.nodes}")]).report()
        return 2
    return TrainJob(settings, allocation).run()


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "")
    return default if value == "" else value.lower() not in ("0", "false", "no", "off")


def parse_args(argv: list[str]) -> TrainJobSettings:
    """`[options] -- DRIVER ARGV...` (options default from the environment) -> TrainJobSettings."""
    if "--" not in argv:
        raise ConfigError([ConfigProblem("train.driver", argv, "put the driver command after `--`: "
                                         "beam-slurm train [options] -- python -m ...")])
    split = argv.index("--")
    options, driver = argv[:split], argv[split + 1:]
    env = os.environ
    parser = argparse.ArgumentParser(prog="beam-slurm train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt-path", default=env.get("CKPT_PATH", ""), help="checkpoint dir on shared storage (CKPT_PATH)")
    parser.add_argument("--log-dir", default=env.get("BEAM_LOG_DIR", ""), help="per-attempt logs root (BEAM_LOG_DIR)")
    parser.add_argument("--nodes", type=int, default=int(env.get("BEAM_NODES", "0") or 0))
    parser.add_argument("--gpus-per-node", type=int, default=int(env.get("BEAM_GPUS_PER_NODE", env.get("SLURM_GPUS_ON_NODE", "8")) or 0))
    parser.add_argument("--max-requeues", type=int, default=int(env.get("BEAM_MAX_REQUEUES", "3")))
    parser.add_argument("--grace-s", type=float, default=float(env.get("BEAM_GRACE_S", "240")))
    parser.add_argument("--stop-grace-s", type=float, default=float(env.get("BEAM_STOP_GRACE_S", "45")))
    parser.add_argument("--no-requeue-on-failure", action="store_true")
    parser.add_argument("--no-preflight", action="store_true", default=not _env_bool("BEAM_PREFLIGHT", True))
    parser.add_argument("--preflight-read", action="append", default=[], metavar="PATH",
                        help="path every node must read (default: MODEL_PATH and DATA_DIR when set)")
    parser.add_argument("--skyrl-dir", default=env.get("SKYRL_DIR", ""))
    parser.add_argument("--scratch-dir", default=env.get("OPTIMIZER_STATE_DISK_DIR", ""))
    parser.add_argument("--scratch-need-gb", type=float, default=0.0)
    parser.add_argument("--host-ram-need-gb", type=float, default=0.0)
    parser.add_argument("--ckpt-need-gb", type=float, default=0.0)
    parser.add_argument("--ray-settings", default=env.get(SETTINGS_ENV, ""), help="RaySettings as JSON")
    args = parser.parse_args(options)
    readable = args.preflight_read or [p for p in (env.get("MODEL_PATH"), env.get("DATA_DIR")) if p]
    ray = RaySettings.from_mapping(json.loads(args.ray_settings)) if args.ray_settings else RaySettings()
    if not args.log_dir and args.ckpt_path:
        args.log_dir = str(Path(args.ckpt_path).parent / "logs")
    gib = 1024**3
    return TrainJobSettings(
        driver=driver, ckpt_path=args.ckpt_path, log_dir=args.log_dir, nodes=args.nodes,
        gpus_per_node=args.gpus_per_node, max_requeues=args.max_requeues, grace_s=args.grace_s,
        stop_grace_s=args.stop_grace_s, requeue_on_failure=not args.no_requeue_on_failure,
        preflight=not args.no_preflight,
        preflight_checks=PreflightSettings(readable_paths=readable, skyrl_dir=args.skyrl_dir, scratch_dir=args.scratch_dir,
                                           scratch_need_bytes=int(args.scratch_need_gb * gib),
                                           host_ram_need_bytes=int(args.host_ram_need_gb * gib),
                                           ckpt_dir=args.ckpt_path, ckpt_need_bytes=int(args.ckpt_need_gb * gib)),
        ray=ray,
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = parse_args(argv)
    except ConfigError as exc:
        exc.report()
        return 2
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"beam-slurm train: {exc}", file=sys.stderr)
        return 2
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
