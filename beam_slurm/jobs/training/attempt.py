"""One attempt of the training job, in the batch shell: preflight on every node, the Ray cluster in the background (a
step per node, `python -m beam_slurm.jobs.ray_cluster.node -- DRIVER...`, the driver on the head: `ray_steps`), then
waiting. A warm in-job restart (`policy.restart`) keeps the cluster: only new nodes run the preflight and start a
step, and the head runs the driver again. A
notice (USR1 before the time limit from `#SBATCH --signal=B:USR1@N`, to this shell only; SIGTERM: preemption; USR2:
`beam-slurm requeue|stop`, after writing the wanted outcome into the run record) starts the save sequence: ask the
trainer to save at the next step boundary (`notice.request_save`), wait up to `grace_s` for its acknowledgement
(`notice.saved_since`) or the run's end, then stop the Ray step (SIGTERM through Slurm to every node). A SIGTERM or the
Ray step's death is checked against `scontrol show job`: a `scontrol requeue` or `scancel` signals every step at once,
so there is nothing to save and, for a requeue, nothing to ask.

The facts then go to `requeue_policy.decide`, whose decision this module carries out (`scontrol requeue`, the excluded
nodes, or the exit status). Each attempt's start and end, the bad nodes and the job's outcome go to the run record
(`beam_slurm.core.run_record`); its logs to `<log_dir>/<jobid>-<attempt>/`."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from beam_slurm.config.job_spec import JobSpec
from beam_slurm.config.ports import ephemeral_range
from beam_slurm.core import layout, notice
from beam_slurm.core import ray_records as records
from beam_slurm.core.atomic_files import read_json, write_json
from beam_slurm.core.errors import UserError
from beam_slurm.core.layout import ATTEMPT_DIR_ENV
from beam_slurm.core.logs import installed
from beam_slurm.core.progress import read_progress
from beam_slurm.core.run_record import RunRecord, TrainJob, Wanted
from beam_slurm.core.run_store import RunStore, now, remember_job
from beam_slurm.jobs.ray_cluster import auth
from beam_slurm.jobs.ray_cluster.hang_dump import EXIT_SURVIVORS
from beam_slurm.jobs.ray_cluster.rendezvous import Rendezvous
from beam_slurm.jobs.training import preflight, storage_probe
from beam_slurm.jobs.training.job_settings import TrainJobSettings
from beam_slurm.jobs.training.ray_steps import RaySteps
from beam_slurm.jobs.training.steps import StepLauncher
from beam_slurm.policy import hang_watch
from beam_slurm.policy.attempt import (
    AttemptState,
    bad_node_reasons,
    bad_nodes_to_avoid,
    decision_summary,
    failure_reason,
    notice_missed_at_start,
    outcome_reason,
    save_grace_s,
    save_reason,
    slurm_end_of_job,
    time_left_s,
)
from beam_slurm.policy.notice_budget import STOP_FILE, term_notice
from beam_slurm.policy.requeue import (
    AttemptFacts,
    Decision,
    decide,
    exclusion,
    failed_node,
    no_progress_streak,
    stop_waiting_for_save,
)
from beam_slurm.policy.restart import RestartPlan, plan_restart
from beam_slurm.slurm import scheduler
from beam_slurm.slurm.preemption import read_preemption

logger = logging.getLogger(__name__)
_POLL_S = 0.2
HANG_POLL_S = 2.0  # how often the watchdog reads the trainer's heartbeat
HANG_FOLDER = "hang"  # in the attempt's log folder: a folder per node with the hang's dumps (`ray_cluster.hang_dump`)
NOTICE_IGNORED_ENV = "BEAM_NOTICE_IGNORED_AT_START"  # set by the training scripts beside `trap '' USR1`
RESTART_BRING_UP_S = 120.0  # beyond the notice lead, the least time left an in-job restart needs (bring-up, a step)
RESTART_WAIT_S = 120.0  # how long a head whose driver failed keeps the cluster up for the batch shell's warm restart
WORKERS_END_S = 5.0  # after the head's step ended, how long the workers' steps get to end by themselves
DUMP_STEP = "hang-dump"
DUMP_STEP_TIMEOUT_S = 120.0
_SAVE_POLL_S = 0.5
_SLURM_ENDS_EVERYTHING = ("requeued", "cancelled", "time limit")
"""What Slurm may be doing when a SIGTERM arrives that signals every step at once: no save can be made."""


def process_start_time() -> float:
    """When this process started (Linux: from /proc, in clock ticks since boot), so bring-up timing counts the
    interpreter's start and the recipe's loading; else now."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


class Attempt:
    """One attempt of the training job, run in the batch shell: the signals, steps and run record; what it recorded
    is `state` (`policy.attempt.AttemptState`), and each decision is asked of `policy.attempt` or `policy.requeue`."""

    def __init__(
        self,
        settings: TrainJobSettings,
        allocation: scheduler.AllocationInfo,
        in_job: int = 0,
        step_nodes: list[str] | None = None,
        allocation_bad: tuple[str, ...] = (),
        replaced: list[str] | None = None,
        notices: list[tuple[str, float]] | None = None,
        cluster: RaySteps | None = None,
        plan: RestartPlan | None = None,
        restart: dict[str, Any] | None = None,
    ):
        self.settings, self.alloc = settings, allocation
        self.state = AttemptState(
            in_job=in_job,
            # Spares and failed nodes left out.
            step_nodes=list(step_nodes or allocation.nodes[: settings.nodes]),
            allocation_bad=tuple(allocation_bad),
            replaced=list(replaced or []),
            notices=[] if notices is None else notices,
            started_at=process_start_time(),
            job_entry=TrainJob(job_id=str(allocation.job_id)),
        )
        self.label = layout.attempt_label(allocation.restart_count, in_job)
        self.attempt_dir = Path(settings.log_dir) / f"{allocation.job_id}-{self.label}"
        self.cluster = cluster  # the running Ray cluster a warm restart keeps; None until this attempt starts one
        self.plan = plan if cluster is not None else None  # how this attempt restarts (warm); None: a cold start
        self.next_plan: RestartPlan | None = None  # set when this attempt ends in an in-job restart
        # The run record's `restart` of this attempt (`goodput.restart_phases`), and of the next one when it restarts.
        self.restart = dict(restart or {})
        self.next_restart: dict[str, Any] = {}
        self.nodes = len(self.state.step_nodes)
        hook = settings.container(allocation.job_id) if callable(settings.container) else settings.container
        pinned = self.state.step_nodes if in_job or self.nodes < len(allocation.nodes) else []
        self.launcher = StepLauncher(
            hook=hook,
            python=settings.python,
            nodes=self.nodes,
            gpus_per_node=settings.gpus_per_node,
            cpus_per_task=allocation.cpus_on_node,
            nodelist=pinned,
        )
        self.record: RunStore | None = None  # None when the job has no run record (a driver run under train_job)

    def prefix(self) -> str:
        return f"[beam-slurm train {time.strftime('%H:%M:%S')} job {self.alloc.job_id} attempt {self.label}] "

    def step_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.launcher.hook.env)
        nccl_timeout = hang_watch.nccl_timeout_s(self.settings.hang)
        if nccl_timeout is not None:
            # NCCL's own timeout stays behind the watchdog's; its flight recorder dumps into the hang folder.
            env = {
                hang_watch.NCCL_TIMEOUT_ENV: str(nccl_timeout),
                "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
                "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                **env,
            }
        env.update(self.attempt_env())
        return env

    def attempt_env(self) -> dict[str, str]:
        """What differs from one attempt to the next in the nodes' and the driver's environment (a warm restart hands
        these to the head for the new driver)."""
        env = {
            ATTEMPT_DIR_ENV: str(self.attempt_dir),  # where every node and the driver find the job spec
            layout.IN_JOB_ATTEMPT_ENV: str(self.state.in_job),
        }
        if (
            hang_watch.nccl_timeout_s(self.settings.hang) is not None
            and "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in os.environ
        ):
            env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = str(self.attempt_dir / HANG_FOLDER / "nccl_trace_rank_")
        if self.alloc.restart_count > 0 or self.state.in_job > 0:
            env["RESUME_MODE"] = "latest"
        return env

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
            signal.signal(
                sig, lambda signum, _frame: self.state.notices.append((signal.Signals(signum).name, time.time()))
            )

    def notice_before_listening(self) -> None:
        """The batch scripts ignore USR1 until this process listens (`trap '' USR1`: its default action would end the
        shell), so a notice Slurm sent before then is lost. Slurm sends it `signal_before_s` (up to 60 s more) before
        the time limit: an attempt starting with less time left takes it as a notice. Only where the batch script
        ignored it (NOTICE_IGNORED_ENV): elsewhere an early USR1 ends the process, and without --signal none comes."""
        if not os.environ.get(NOTICE_IGNORED_ENV):
            return
        left = self.time_left(self.job_info())
        if notice_missed_at_start(left, self.settings.signal_before_s):
            logger.info(
                f"{left:.0f} s left of the time limit at the start, inside the notice lead "
                f"({self.settings.signal_before_s:.0f} s): the notice Slurm sent before this process listened "
                "is taken now"
            )
            self.state.notices.append(("SIGUSR1", time.time()))

    def run_preflight(self, env: dict[str, str], hosts: list[str] | None = None) -> bool:
        """The preflight on the attempt's nodes, or on `hosts` only (a warm restart's new nodes)."""
        canary = self.attempt_dir / "shared-storage-canary"
        canary.write_text(f"{self.alloc.job_id}\n")
        checks = dataclasses.replace(
            self.settings.preflight_checks, gpus_per_node=self.settings.gpus_per_node, shared_canary=str(canary)
        )
        launcher = self.launcher
        if hosts is None:
            hosts = self.state.step_nodes  # the step is pinned to them when the allocation has more
        else:
            launcher = dataclasses.replace(self.launcher, nodes=len(hosts), nodelist=list(hosts))
        failed = preflight.run_step(launcher, checks, hosts, env, self.attempt_dir, self.settings.ray)
        self.state.preflight_failed_nodes.extend(h for h in failed if h not in self.state.preflight_failed_nodes)
        return not failed

    def sigterm_is_notice(self) -> bool:
        """Whether the Ray step holds a preemption's first SIGTERM and the head relays it as a notice: when the
        partition's (or QOS's) grace time fits the save at the preflight's bandwidth (`notice_budget.term_notice`)."""
        info = read_preemption(os.environ.get("SLURM_JOB_PARTITION") or None)
        held, why = term_notice(
            info, self.settings.qos or None, self.settings.save_cost, storage_probe.slowest_recorded(self.attempt_dir)
        )
        logger.info(
            f"a preemption's SIGTERM to the tasks {'is held as a notice' if held else 'stops the Ray step'}: {why}"
        )
        return held

    def write_job_spec(self, sigterm_notice: bool, preflight_window: tuple[float, float] | None) -> None:
        """What the nodes and the driver of this attempt need, in the attempt's folder (`ray_cluster.job_spec`)."""
        s = self.settings
        JobSpec(
            ray=s.ray,
            gpus_per_node=s.gpus_per_node,
            log_copy=s.log_copy,
            env_manifest=s.env_manifest,
            sigterm_notice=sigterm_notice,
            # The head waits for a warm restart only while another in-job restart may come.
            restart_wait_s=RESTART_WAIT_S if self.state.in_job < s.max_in_job_attempts else 0.0,
            job_start_time=self.state.started_at,
            preflight_window=preflight_window,
            ray_step_launch_time=time.time(),
        ).write(self.attempt_dir)

    def start_ray_step(self, env: dict[str, str]) -> None:
        """A new cluster: a step on every node of the attempt."""
        self.cluster = RaySteps(
            launcher=self.launcher,
            job_id=str(self.alloc.job_id),
            driver=list(self.settings.driver),
            cluster=f"in{self.state.in_job}",
            ranks=list(self.state.step_nodes),
        )
        argv = self.cluster.argv(self.cluster.head)
        logger.info(
            f"starting the Ray steps on {self.nodes} nodes, one a node: "
            f"{shlex.join(argv[: argv.index(self.settings.python)])} ..."
        )
        self.cluster.start(self.cluster.ranks, env, self.attempt_dir)
        self.state.ray_step_started = time.time()

    def restart_warm(self, env: dict[str, str]) -> None:
        """Carry out the warm plan: stop the nodes left out, ask the head to restart the driver (the kept nodes check
        that the old driver's processes are gone) and start the new nodes' steps, which join the running cluster."""
        assert self.cluster is not None and self.plan is not None
        plan, cluster = self.plan, self.cluster
        logger.info(f"{plan.why} (nodes in rank order: {','.join(plan.ranks)})")
        if plan.stop:
            cluster.stop(plan.stop, self.settings.stop_grace_s)
        cluster.forget([h for h in cluster.ranks if h not in plan.keep])
        cluster.ranks = list(plan.ranks)
        request = {
            "in_job": self.state.in_job,
            "attempt_dir": str(self.attempt_dir),
            "ranks": list(plan.ranks),
            "keep": list(plan.keep),
            "start": list(plan.start),
            "env": self.attempt_env(),
            "driver": list(self.settings.driver),  # made again for this attempt (`train_job.run`): it resumes
            "time": time.time(),
        }
        write_json(self.rendezvous().restart_file(self.state.in_job), request)
        cluster.start(plan.start, env, self.attempt_dir)
        self.state.ray_step_started = time.time()

    def stop_ray_step(self) -> int:
        """Stop every node's step (notices, a cold restart, the end); the head's step status."""
        assert self.cluster is not None
        if not self.cluster.running():
            return self.head_status()
        # Our own stop: the nodes must not hold this SIGTERM as a preemption's notice.
        for folder in self.cluster.attempt_dirs:
            records.mark_stopping(folder)
        began = time.time()
        self.cluster.stop(grace_s=self.settings.stop_grace_s)
        status = self.head_status()
        seconds = round(time.time() - began, 3)  # one value for the file and the log line
        # What the notice budget counts for stopping Ray and copying logs, once the run has stopped once.
        write_json(self.attempt_dir / STOP_FILE, {"seconds": seconds, "time": time.time()})
        logger.info(f"the Ray step stopped in {seconds:.1f}s (driver, Ray and the last log copy of every node)")
        return status

    def rendezvous(self) -> Rendezvous:
        """The running cluster's rendezvous folder (the nodes' and the head's), where restart requests go."""
        assert self.cluster is not None
        folder = auth.job_dir(self.settings.ray, self.alloc.job_id)
        return Rendezvous(folder, self.alloc.restart_count, self.cluster.cluster)

    def head_status(self) -> int:
        assert self.cluster is not None
        status = self.cluster.status(self.cluster.head)
        return records.EXIT_INFRA if status is None else status

    def poll_cluster(self) -> int | None:
        """None while the cluster runs on; else the status this attempt ended with: the head's step's, a failed
        worker's step's, or the driver's while the head waits for a warm restart."""
        assert self.cluster is not None
        head = self.cluster.status(self.cluster.head)
        if head is not None:
            deadline = time.monotonic() + WORKERS_END_S  # they see the driver's end, or lose the head, and stop
            while self.cluster.running() and time.monotonic() < deadline:
                time.sleep(_POLL_S)
            if self.cluster.running():
                self.stop_ray_step()
            return head
        ended = self.cluster.ended_workers()
        if ended and self.rendezvous().ended_file.exists():
            ended = {}  # the driver ended for good: the workers stop first, the head follows
        if ended:  # while the head runs even a clean end is a loss: Slurm removed the node, or signalled its step
            host, status = next(iter(ended.items()))
            logger.info(f"the Ray step on {host} ended with status {status}")
            # The driver must not train on (and save) without the node while this shell decides.
            self.rendezvous().stop_driver_file(self.state.in_job).touch()
            return status or records.EXIT_INFRA
        driver = records.read_driver_status(self.attempt_dir)
        if driver is not None and driver != 0:
            return driver  # the head keeps the cluster up for a warm restart (job spec's restart_wait_s)
        return None

    def wait_step(self) -> AttemptFacts:
        """Wait for the Ray cluster, handling a notice; what happened."""
        assert self.cluster is not None
        next_look = 0.0
        while True:
            if self.state.notices:
                return self.handle_notice()
            status = self.poll_cluster()
            if status is not None:
                if status != 0:  # say why it failed: the first failure a node recorded
                    self.state.slurm_end = self.ask_slurm()
                    failure = records.read_failure(self.attempt_dir)
                    driver = records.read_driver_status(self.attempt_dir)
                    logger.info(
                        f"{failure.get('kind')} failure on {failure.get('node')}: {failure.get('reason')}"
                        if failure
                        else f"the Ray step ended with status {status} (driver status {driver})"
                    )
                return self.facts(step_status=status)
            if time.monotonic() >= next_look:
                self.note_restart_ready()
                next_look = time.monotonic() + HANG_POLL_S
                hang = hang_watch.check(
                    self.settings.hang,
                    read_progress(self.settings.ckpt_path),
                    watching_since=self.state.ray_step_started or 0.0,
                    now=time.time(),
                )
                if hang is not None:
                    return self.handle_hang(hang)
            time.sleep(_POLL_S)

    def handle_hang(self, hang: hang_watch.Hang) -> AttemptFacts:
        """Dump every process's stacks of the Ray steps on every node. When the restart that follows can be warm the
        cluster is left running (the head stops the driver, every kept node ends what is left of it); else stop the
        steps and end what is left (SIGCONT, SIGTERM, SIGKILL). The nodes the dumps point at, or where a process
        survived SIGKILL, are bad."""
        folder = self.attempt_dir / HANG_FOLDER
        self.state.hang_detected_at = time.time()
        logger.info(
            f"{hang.describe()}: {hang.details()}; saving the stacks of the Ray step's processes on every node "
            f"in {folder}"
        )
        assert self.cluster is not None
        step_id = ",".join(i.split(".", 1)[1] for i in self.cluster.step_ids() if "." in i)
        if not step_id:
            logger.info("could not find the Ray steps (squeue); no dumps")
        began = time.time()
        processes = self.run_dump_step(folder, step_id, end=False) if step_id else []
        suspects, why = hang_watch.suspects(processes)
        logger.info(
            f"dumped {sum(1 for p in processes if p.frame)} of {len(processes)} processes in "
            f"{time.time() - began:.1f}s; {why}"
        )
        self.state.hang_dumps = str(folder)
        running = self.facts(hang=hang.describe(), hang_nodes=tuple(sorted(suspects)), step_status=None)
        if self.restart_plan(decide(running), running).warm:
            return running
        status = self.stop_ray_step()
        survivors = self.run_dump_step(folder, step_id, end=True) if step_id else []
        for row in survivors:
            logger.info(f"pid {row['pid']} ({row['role']}) on {row['node']} survived SIGKILL (state {row['state']})")
        nodes = tuple(sorted(set(suspects) | {row["node"] for row in survivors}))
        return self.facts(hang=hang.describe(), hang_nodes=nodes, step_status=status)

    def run_dump_step(self, folder: Path, step_id: str, *, end: bool) -> list:
        """One `hang_dump` task per node beside the Ray step (`--overlap`); what each node wrote."""
        argv = scheduler.srun_per_node(
            self.nodes,
            [
                *self.launcher.hook.command_prefix,
                self.settings.python,
                "-m",
                "beam_slurm.jobs.ray_cluster.hang_dump",
                "--dir",
                str(folder),
                "--job",
                str(self.alloc.job_id),
                "--step",
                step_id,
                *(["--end"] if end else []),
            ],
            # --overlap shares Ray's CPUs; --mem=0 its memory (else "Memory required by task is not available").
            kill_on_bad_exit=False,
            job_name=DUMP_STEP,
            extra_args=["--overlap", "--mem=0", *self.launcher.placement_args()],
        )
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=DUMP_STEP_TIMEOUT_S, check=False)
            if done.returncode not in (0, EXIT_SURVIVORS):
                logger.info(
                    f"the {DUMP_STEP} step ended with status {done.returncode}: "
                    f"{' '.join((done.stderr or done.stdout).split())[-600:]}"
                )
        except subprocess.TimeoutExpired:
            logger.info(f"the {DUMP_STEP} step did not end within {DUMP_STEP_TIMEOUT_S:.0f}s")
        if end:
            return [
                {**row, "node": node.name}
                for node in sorted(folder.glob("*/"))
                for row in (read_json(node / "ended.json") or {}).get("survivors", [])
            ]
        return [
            hang_watch.DumpedProcess(
                node=row["node"], pid=row["pid"], role=row["role"], state=row["state"], frame=row.get("frame", "")
            )
            for node in sorted(folder.glob("*/"))
            for row in read_json(node / "processes.json") or []
        ]

    def handle_notice(self) -> AttemptFacts:
        assert self.cluster is not None
        name, received = self.state.notices[0]
        self.state.wanted = self.read_wanted()
        if name == "SIGTERM" and self.state.wanted is None:
            self.state.slurm_end = self.ask_slurm()
            if self.state.slurm_end in _SLURM_ENDS_EVERYTHING:
                # Every step got the same SIGTERM: the trainer stops now, there is nothing to wait for. The
                # decision is said first: Slurm may SIGKILL this shell (KillWait) while the steps wind down, which
                # the attempt's end (`run`) then waits for.
                logger.info(
                    f"notice SIGTERM: Slurm is ending this attempt ({self.state.slurm_end}); every step was "
                    "signalled, so no checkpoint can be saved"
                )
                return self.facts(notice=name, step_status=self.cluster.status(self.cluster.head))
        grace_s = save_grace_s(self.state.wanted, self.settings.grace_s)
        why_save = save_reason(name, self.state.wanted, (self.attempt_dir / records.TERM_RELAYED_FILE).exists())
        logger.info(
            f"notice {name} received ({why_save}): asking the trainer to save a checkpoint (grace {grace_s:.0f}s)"
        )
        notice.request_save(self.settings.ckpt_path, why_save)
        while True:
            saved = notice.saved_since(self.settings.ckpt_path, received)
            why = stop_waiting_for_save(
                now=time.time(),
                received=received,
                grace_s=grace_s,
                saved_step=saved,
                step_running=self.cluster.status(self.cluster.head) is None,
                notices=len(self.state.notices),
            )
            if why is not None:
                break
            time.sleep(_SAVE_POLL_S)
        if saved is None:  # a save acknowledged as the step ended or the grace ran out still counts
            saved = notice.saved_since(self.settings.ckpt_path, received)
        if why == "second notice":
            logger.info(f"second notice {self.state.notices[-1][0]}: stopping without waiting for the save")
        if saved is not None:
            logger.info(f"checkpoint of step {saved} saved on notice after {time.time() - received:.1f}s")
        elif self.cluster.status(self.cluster.head) is None:
            logger.info(
                "no checkpoint saved on notice within the grace period; the next attempt resumes from the last "
                "periodic checkpoint"
            )
        return self.facts(notice=name, saved_step=saved, step_status=self.stop_ray_step())

    def facts(self, **seen: Any) -> AttemptFacts:
        """This attempt's facts: what the caller saw plus what the nodes and the run record say."""
        failure = records.read_failure(self.attempt_dir)
        nodes = tuple(self.state.step_nodes)
        wanted = (
            self.state.wanted if self.state.wanted is not None else (self.read_wanted() if self.state.notices else None)
        )
        seen.setdefault("slurm_end", self.state.slurm_end)
        now_nodes, left = self.allocation_now()
        unusable = set(self.state.allocation_bad) | set(self.state.preflight_failed_nodes)
        storage_full = failure is not None and failure.get("kind") == "storage"
        s = self.settings
        return AttemptFacts(
            restart_count=self.alloc.restart_count,
            max_requeues=s.max_requeues,
            driver_status=records.read_driver_status(self.attempt_dir),
            failure_reason=failure_reason(failure, s.ckpt_path, self.storage_usage() if storage_full else None),
            failure_kind=failure.get("kind") if failure else None,
            nodes=nodes,
            failure_node=failed_node(failure, nodes[0] if nodes else None),
            lost_nodes=tuple(n for n in nodes if n not in now_nodes),
            in_job_attempt=self.state.in_job,
            max_in_job_attempts=s.max_in_job_attempts,
            usable_nodes=tuple(n for n in now_nodes if n not in unusable),
            nodes_needed=s.nodes,
            time_left_s=left,
            restart_needs_s=s.signal_before_s + RESTART_BRING_UP_S,
            preflight_failed_nodes=tuple(self.state.preflight_failed_nodes),
            wanted=wanted.action if wanted else None,
            checkpoint_at_start=self.state.checkpoint_at_start,
            checkpoint_at_end=self.checkpoint(),
            earlier_without_progress=no_progress_streak([a for a in self.state.job_entry.attempts if a.ended]),
            max_attempts_without_progress=s.max_attempts_without_progress,
            **seen,
        )

    def storage_usage(self) -> tuple[int, int] | None:
        """Free and total bytes of the checkpoint storage; None when it cannot be read."""
        try:
            usage = shutil.disk_usage(self.settings.ckpt_path)
        except OSError:
            return None
        return usage.free, usage.total

    def allocation_now(self) -> tuple[list[str], float | None]:
        """The job's nodes as Slurm has them now (fewer after it removed a failed node: --no-kill) and the time
        left; the allocation as it started when scontrol does not answer."""
        try:
            info = scheduler.job_info(self.alloc.job_id)
            nodes = scheduler.expand_hostnames(info.get("NodeList", ""))
        except scheduler.SlurmCommandError:
            return list(self.alloc.nodes), self.time_left({})
        return nodes or list(self.alloc.nodes), self.time_left(info)

    def time_left(self, info: dict[str, str]) -> float | None:
        """`time_left_s` of the job's `scontrol show job`, or of its SLURM_JOB_END_TIME when scontrol gave none."""
        return time_left_s(info, self.alloc.extra.get("SLURM_JOB_END_TIME"), time.time())

    def carry_out(self, decision: Decision, facts: AttemptFacts | None = None) -> int:
        """Requeue, restart in the job or end as decided, told in the run record; the batch shell's exit status."""
        self.record_end(decision, facts)
        if decision.restart_in_job:
            self.state.restart = decision
            self.next_plan = self.restart_plan(decision, facts)
            failure = records.read_failure(self.attempt_dir) or {}
            seen = [t for t in (failure.get("time"), self.state.hang_detected_at) if t]
            self.next_restart = {
                "warm": self.next_plan.warm,
                "why": self.next_plan.why,
                "fault_at": min(float(t) for t in seen) if seen else None,  # when a node or the watchdog saw it
                "decided_at": time.time(),
            }
            logger.info(
                f"{decision.reason}: {decision.note} (attempt "
                f"{layout.attempt_label(self.alloc.restart_count, self.state.in_job + 1)}, "
                f"from the latest checkpoint; no requeue; {self.next_plan.why})"
            )
            return 0
        # Slurm signals this shell (and its children) once the job is requeued: ask sinfo before that.
        exclude = self.plan_exclusion(decision) if decision.requeue or decision.already_requeued else None
        if decision.already_requeued:
            self.state.requeued = True
            logger.info(f"{decision.reason}: the job is already requeued; {decision.note}")
            self.exclude_bad_nodes(exclude)
            return 0
        if not decision.requeue:
            logger.info(f"{decision.reason}: {decision.note}" if decision.note else decision.reason)
            return decision.exit_status
        try:
            scheduler.requeue(self.alloc.job_id)
        except scheduler.SlurmCommandError as exc:
            if self.ask_slurm() != "requeued":
                logger.info(f"{decision.reason}: requeue failed: {exc} (is the job submitted with --requeue?)")
                return decision.exit_status
            logger.info(f"{decision.reason}: Slurm had already requeued the job")
        self.state.requeued = True
        where = f" ({decision.note})" if decision.note else ""
        logger.info(
            f"{decision.reason}{where}: job requeued (attempt {self.alloc.restart_count + 1} of at most "
            f"{self.settings.max_requeues + 1} will resume from the latest checkpoint)"
        )
        self.exclude_bad_nodes(exclude)
        return 0

    def job_info(self) -> dict[str, str]:
        """`scontrol show job` of this job; {} when scontrol does not answer."""
        with contextlib.suppress(scheduler.SlurmCommandError):
            return scheduler.job_info(self.alloc.job_id)
        return {}

    def checkpoint(self) -> int | None:
        return layout.latest_checkpoint_step(self.settings.ckpt_path)

    def ask_slurm(self) -> str | None:
        """`requeue_policy.slurm_end_of` now; None when the job runs on or scontrol does not answer."""
        try:
            info = scheduler.job_info(self.alloc.job_id)
        except scheduler.SlurmCommandError as exc:
            logger.info(f"could not ask Slurm about the job: {exc}")
            return None
        return slurm_end_of_job(info, self.alloc.restart_count)

    def _record_call(self, what: str, call, *args, **kwargs):
        """Write to the run record; a record that cannot be written never stops training (logged)."""
        if self.record is None:
            return None
        try:
            return call(self.record, *args, **kwargs)
        except (OSError, ValueError, UserError) as exc:
            logger.warning(f"warning: could not {what} in {self.record.run_file}: {exc}")
            return None

    def read_wanted(self) -> Wanted | None:
        with contextlib.suppress(OSError, UserError):
            return self.record.read().wanted_for(self.alloc.job_id) if self.record is not None else None
        return None

    def record_start(self) -> None:
        """Write the run record's entry for this attempt (and the job, and the run when started with sbatch)."""
        self.state.checkpoint_at_start = self.checkpoint()
        info = dict(self.settings.run_info or {})
        if not info.get("export_path"):
            return
        self.record = RunStore(info["export_path"])
        config_yaml = info.pop("config_yaml", None)
        first = self.alloc.restart_count == 0 and self.state.in_job == 0
        if first and config_yaml:
            self._record_call("write the resolved recipe", RunStore.write_config, config_yaml)
        job = self.job_info() if first else {}
        user_exclude = [n for n in (job.get("ExcNodeList") or "").split(",") if n and n != "(null)"]
        with contextlib.suppress(scheduler.SlurmCommandError):
            user_exclude = scheduler.expand_hostnames(",".join(user_exclude))

        def begin(run: RunRecord) -> tuple[TrainJob, list[str]]:
            run.fill_in(info)
            return run.begin_attempt(
                job_id=self.alloc.job_id,
                attempt=self.alloc.restart_count,
                in_job=self.state.in_job,
                replaced=self.state.replaced,
                nodes=self.state.step_nodes,
                checkpoint=self.state.checkpoint_at_start,
                when=now(),
                partition=job.get("Partition", "") or self.alloc.extra.get("SLURM_JOB_PARTITION", ""),
                nodes_needed=self.nodes,
                user_exclude=user_exclude,
                stdout="" if job.get("StdOut") in (None, "(null)") else job["StdOut"],
                restart=self.restart,
            )

        snapshot = self._record_call("record the attempt's start", lambda store: store.update(begin))
        if snapshot:
            self.state.job_entry, self.state.bad_nodes = snapshot
        if first:
            remember_job(self.alloc.job_id, info["export_path"])
        self.state.job_entry.attempts = [
            a
            for a in self.state.job_entry.attempts
            if (a.attempt, a.in_job) != (self.alloc.restart_count, self.state.in_job)
        ]

    def record_end(self, decision: Decision, facts: AttemptFacts | None) -> None:
        self.note_restart_ready()
        checkpoint = self.checkpoint()
        reason = decision.reason + (f": {decision.note}" if decision.note else "")
        saved = facts.saved_step if facts is not None else None
        end = {
            "end_kind": decision.end_kind,
            "end_reason": reason,
            "saved_step": saved,
            "checkpoint_at_end": checkpoint,
            "counts_against_progress": decision.counts_against_progress,
            "decision": decision_summary(decision),
            "exit_status": None if decision.requeue or decision.restart_in_job else decision.exit_status,
            "hang_dumps": self.state.hang_dumps,
            **({"hang_detected_at": self.state.hang_detected_at} if self.state.hang_detected_at else {}),
        }
        failure_node = facts.failure_node if facts is not None else None
        failure = records.read_failure(self.attempt_dir) if failure_node in decision.bad_nodes else None
        bad = bad_node_reasons(decision, failure_node, failure)
        outcome = decision.outcome or None
        self._record_call(
            "record the attempt's end",
            lambda store: store.update(
                lambda run: run.end_attempt(
                    job_id=self.alloc.job_id,
                    attempt=self.alloc.restart_count,
                    in_job=self.state.in_job,
                    when=now(),
                    end=end,
                    bad_nodes=bad,
                    outcome=outcome,
                    outcome_reason=outcome_reason(outcome, checkpoint, reason),
                    resumable_end=outcome in ("stopped", "failed") and checkpoint is not None,
                    wanted_handled=facts is not None and facts.wanted is not None,
                )
            ),
        )

    def plan_exclusion(self, decision: Decision) -> tuple[list[str], list[str]] | None:
        """(bad nodes, the new ExcNodeList: bad nodes plus the user's own --exclude) when the partition keeps enough
        other nodes; None (and the log says why) when there is nothing to exclude or it cannot be done."""
        bad = sorted(set(self.state.bad_nodes) | set(decision.bad_nodes))
        if not bad:
            return None
        partition = self.state.job_entry.partition or self.alloc.extra.get("SLURM_JOB_PARTITION", "")
        try:
            usable = scheduler.usable_partition_nodes(partition)
        except scheduler.SlurmCommandError as exc:
            logger.info(f"bad nodes {','.join(bad)} not excluded: cannot list the partition's nodes ({exc})")
            return None
        wanted, why = exclusion(bad, list(self.state.job_entry.user_exclude), usable, self.nodes)
        if wanted is None:
            logger.info(f"bad nodes {','.join(bad)} not excluded: {why}; requeued as before")
            return None
        return bad, wanted

    def exclude_bad_nodes(self, plan: tuple[list[str], list[str]] | None) -> None:
        """After the requeue (the job is then completing, and Slurm accepts a new list; it replaces the old one)."""
        if plan is None:
            return
        bad, wanted = plan
        try:
            scheduler.update_excluded_nodes(self.alloc.job_id, wanted)
        except scheduler.SlurmCommandError as exc:
            logger.info(f"bad nodes {','.join(bad)} not excluded: {exc}; the next attempt checks its nodes itself")
            return
        logger.info(f"the next attempt avoids {','.join(bad)}: ExcNodeList={','.join(wanted)}")
        self._record_call(
            "record the excluded nodes",
            lambda store: store.update(
                lambda run: setattr(run.train_job(self.alloc.job_id), "excluded_nodes", list(wanted))
            ),
        )

    def avoid_bad_nodes(self) -> bool:
        """The fallback when the exclusion could not be set: if this attempt landed on a recorded bad node, set the
        list now and requeue once (per job). True when the job was requeued."""
        landed = bad_nodes_to_avoid(self.state)
        if not landed:
            return False
        if self.plan_exclusion(Decision(True, 0, "")) is None:
            logger.info(f"this attempt runs on bad node(s) {','.join(landed)} anyway")
            return False
        logger.info(
            f"this attempt landed on bad node(s) {','.join(landed)} (the exclusion was not set): requeueing "
            "once without them"
        )
        self._record_call(
            "record the bad-node requeue",
            lambda store: store.update(
                lambda run: setattr(run.train_job(self.alloc.job_id), "avoided_bad_nodes", True)
            ),
        )
        decision = Decision(True, 0, f"landed on bad node(s) {','.join(landed)}", end_kind="bad-node-avoided")
        return self.carry_out(decision) == 0 and self.state.requeued

    def run(self) -> int:
        self.install_signal_handlers()
        self.attempt_dir.mkdir(parents=True, exist_ok=True)
        with installed("beam_slurm.jobs", self.prefix, self.attempt_dir / "train_job.log"):
            try:
                logger.info(
                    f"{self.nodes} nodes ({','.join(self.state.step_nodes)}), "
                    f"{self.settings.gpus_per_node} GPUs per node, logs in {self.attempt_dir}"
                )
                self.warn_port_range()
                self.record_start()
                self.notice_before_listening()
                if self.avoid_bad_nodes():
                    return 0
                notice.clear(self.settings.ckpt_path)
                first = self.alloc.restart_count == 0 and self.state.in_job == 0
                if first and auth.remove_stale_job_dir(self.settings.ray, self.alloc.job_id):
                    logger.info(
                        f"removed {auth.job_dir(self.settings.ray, self.alloc.job_id)}, left by an earlier job "
                        "with the same id"
                    )
                if self.settings.ray.auth:
                    auth.ensure_token(self.settings.ray, self.alloc.job_id)
                env = self.step_env()
                began = time.time()
                new_nodes = list(self.plan.start) if self.plan is not None else None  # warm: only they are checked
                if self.settings.preflight and new_nodes != [] and not self.run_preflight(env, new_nodes):
                    return self.end(self.facts(preflight_failed=True, ray_started=self.plan is not None))
                window = (began, time.time()) if self.settings.preflight else None  # bring-up timing in ray_ready.json
                if self.state.notices:
                    return self.end(self.facts(notice=self.state.notices[0][0], ray_started=self.plan is not None))
                self.write_job_spec(self.sigterm_is_notice(), window)
                if self.plan is not None:
                    self.restart_warm(env)
                else:
                    self.start_ray_step(env)
                return self.end(self.wait_step())
            finally:
                warm = self.next_plan is not None and self.next_plan.warm
                if self.cluster is not None and self.cluster.running() and not warm:
                    self.stop_ray_step()
                if self.next_restart and not warm:
                    self.next_restart["stopped_at"] = time.time()  # cold: the old cluster is down
                if not self.state.requeued and self.state.restart is None:
                    auth.remove_job_dir(self.settings.ray, self.alloc.job_id)

    def end(self, facts: AttemptFacts) -> int:
        return self.carry_out(decide(facts), facts)

    def note_restart_ready(self) -> None:
        """Once this restarted attempt's cluster is ready again (the head's ray_ready.json), put when into the run
        record's `restart` (warm: also when the old driver's processes were found gone): `status` shows it."""
        if not self.restart or "ready_at" in self.restart:
            return
        ready = read_json(self.attempt_dir / records.READY_FILE)
        if ready is None:
            return
        self.restart["ready_at"] = float(ready.get("client_released") or ready.get("registered") or time.time())
        if ready.get("stopping_done"):
            self.restart["stopped_at"] = float(ready["stopping_done"])
        restart = dict(self.restart)

        def note(run: RunRecord) -> None:
            entry = run.train_job(self.alloc.job_id).attempt(self.alloc.restart_count, self.state.in_job)
            if entry is not None:
                entry.restart = restart

        self._record_call("record the restart's bring-up", lambda store: store.update(note))

    def restart_plan(self, decision: Decision, facts: AttemptFacts | None) -> RestartPlan:
        """How an in-job restart on `decision.next_nodes` would go from this attempt's cluster (`policy.restart`),
        from the facts the decision was made on (the failure's node, the nodes Slurm removed); cold when there is no
        decision to restart in the job or no cluster."""
        if not decision.restart_in_job or self.cluster is None or facts is None:
            return RestartPlan(warm=False, why="cold: no running cluster", ranks=decision.next_nodes)
        return plan_restart(
            tuple(self.cluster.ranks),
            tuple(self.cluster.running()),
            decision.next_nodes,
            facts.failure_node,
            facts.lost_nodes,
        )

    def warn_port_range(self) -> None:
        ephemeral = ephemeral_range()
        ray = self.settings.ray
        if ephemeral and ray.port_range_start <= ephemeral[1] and ray.port_range_end > ephemeral[0]:
            logger.warning(
                f"warning: ray.port_range {ray.port_range_start}-{ray.port_range_end} overlaps this host's "
                f"ephemeral ports {ephemeral[0]}-{ephemeral[1]}; Ray may race outgoing connections for ports"
            )
