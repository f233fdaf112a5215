"""The hang watchdog's rules: how long each phase of training may go without a heartbeat, whether it has, and which node
the stack dumps point at; pure functions (no Slurm, no clock). A stuck collective or engine leaves every process alive
and Ray content: the trainer writes a heartbeat at each phase change (`beam_slurm.core.progress`) and the batch shell
ends the attempt as a hang (`attempt.Attempt.handle_hang`) when a phase is silent past its limit. Phases known to be
long get an allowance on top: bring-up and model load and the attempt's first step, a save, an evaluation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from beam_slurm.core.progress import Progress
from beam_slurm.policy.notice_budget import recipe_save_seconds, step_seconds

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig

# An unset timeout is DERIVED_MULTIPLE median steps (a step that takes five times the usual is no longer slow), never
# below DERIVED_FLOOR_S (short steps vary more than long ones, and a hang is never that short).
DERIVED_MULTIPLE = 5.0
DERIVED_FLOOR_S = 600.0
NCCL_TIMEOUT_ENV = "SKYRL_WORKER_NCCL_TIMEOUT_IN_S"  # SkyRL 0.3.0's process-group timeout (its default: 600 s)
# SkyRL's NCCL timeout is set this much above the longest phase: the watchdog fires first, with stack dumps.
NCCL_TIMEOUT_MARGIN_S = 300.0


@dataclass(frozen=True)
class HangLimits:
    """What the watchdog allows, from the recipe (`of`), carried by the training job."""

    timeout_s: float | None  # cluster.hang_timeout_s: None derives it, 0 is off
    expected_step_s: float  # the recipe's step time (trainer.expected_step_s, or the rehearsal's) until one is measured
    start_s: float  # allowance for bring-up and model load (trainer.expected_bringup_s + expected_model_load_s)
    save_s: float  # allowance for a save (what the notice budget expects one to take)
    eval_s: float  # allowance for an evaluation (one step's time: an evaluation is a generation pass)

    @classmethod
    def of(cls, cfg: BeamConfig) -> HangLimits:
        t = cfg.trainer
        step_s = step_seconds(cfg)[0]
        # The rehearsal loads no model: its own load time stands in (as in notice_budget.attempt_progress).
        load_s = t.rehearsal_model_load_s if t.backend == "rehearsal" else t.expected_model_load_s
        timeout = cfg.cluster.hang_timeout_s
        return cls(
            timeout_s=None if timeout is None else float(timeout),
            expected_step_s=step_s,
            start_s=float(t.expected_bringup_s + load_s),
            save_s=float(recipe_save_seconds(cfg)),
            eval_s=step_s,
        )

    @classmethod
    def disabled(cls) -> HangLimits:
        """For a driver of its own (`train_job -- DRIVER`): it writes no heartbeats."""
        return cls(timeout_s=0, expected_step_s=0, start_s=0, save_s=0, eval_s=0)

    @property
    def off(self) -> bool:
        return self.timeout_s == 0

    def base_s(self, median_step_s: float | None) -> float:
        derived = max(DERIVED_FLOOR_S, DERIVED_MULTIPLE * (median_step_s or self.expected_step_s))
        return float(self.timeout_s) if self.timeout_s else derived

    def phase_limit_s(self, progress: Progress | None) -> tuple[float, str]:
        """(seconds the phase may go without a heartbeat, the phase as the log says it)."""
        if progress is None or progress.phase == "load":
            return self.base_s(None) + self.start_s, "bring-up and model load"
        base = self.base_s(progress.median_step_s)
        if progress.phase == "step" and not progress.step_seconds:
            return base + self.start_s, f"step {progress.step}, the attempt's first"
        if progress.phase in ("saving", "after-save"):
            return base + self.save_s, f"{progress.phase} after step {progress.step}"
        if progress.phase == "eval":
            return base + self.eval_s, f"evaluation at step {progress.step}"
        return (
            base,
            f"{progress.phase} {progress.step}"
            if progress.phase == "step"
            else f"{progress.phase} after step {progress.step}",
        )

    def longest_s(self) -> float:
        """The longest any phase may go silent before steps are measured: what NCCL's timeout must stay above."""
        return self.base_s(None) + max(self.start_s, self.save_s, self.eval_s)

    def describe(self) -> str:
        if self.off:
            return "off (cluster.hang_timeout_s=0)"
        head = (
            f"{self.timeout_s:.0f} s a phase (cluster.hang_timeout_s)"
            if self.timeout_s
            else f"{self.base_s(None):.0f} s a phase until steps are measured, then {DERIVED_MULTIPLE:g} x the "
            f"median step, at least {DERIVED_FLOOR_S:.0f} s (cluster.hang_timeout_s unset)"
        )
        return (
            f"{head}; +{self.start_s:.0f} s for bring-up, model load and the first step, +{self.save_s:.0f} s for "
            f"a save, +{self.eval_s:.0f} s for an evaluation"
        )


@dataclass(frozen=True)
class Hang:
    """A phase that went silent for longer than its limit."""

    step: int | None  # the step the last heartbeat named (None: no heartbeat yet in this attempt)
    phase: str  # the last heartbeat's phase (step, saving, after-save, eval, after-eval), or bring-up
    silent_s: float
    limit_s: float

    def describe(self) -> str:
        """'hang at step 6 (step)', as the attempt's end reason begins."""
        return (
            "hang in bring-up and model load (no heartbeat yet)"
            if self.step is None
            else f"hang at step {self.step} ({self.phase})"
        )

    def details(self) -> str:
        return f"no progress for {self.silent_s:.0f} s (limit {self.limit_s:.0f} s)"


def check(limits: HangLimits, progress: Progress | None, *, watching_since: float, now: float) -> Hang | None:
    """A hang, or None. `progress` older than `watching_since` (an earlier attempt's) counts as no heartbeat yet."""
    if progress is not None and progress.since < watching_since:
        progress = None
    if limits.off or (progress is not None and progress.phase == "finished"):
        return None
    limit, _ = limits.phase_limit_s(progress)
    since = progress.since if progress is not None else watching_since
    return (
        Hang(
            step=progress.step if progress else None,
            phase=progress.phase if progress else "bring-up",
            silent_s=now - since,
            limit_s=limit,
        )
        if now - since > limit
        else None
    )


def nccl_timeout_s(limits: HangLimits) -> int | None:
    """SKYRL_WORKER_NCCL_TIMEOUT_IN_S that keeps NCCL's timeout behind the watchdog (None: leave SkyRL's)."""
    return None if limits.off else int(limits.longest_s() + NCCL_TIMEOUT_MARGIN_S)


_FRAME = re.compile(r"^\s+(\S+) \((\S+?):\d+\)")


def innermost_frame(dump: str) -> str:
    """'function (file)' of the first frame of the first thread py-spy printed (the innermost call), '' if none."""
    for line in dump.splitlines():
        match = _FRAME.match(line)
        if match:
            return f"{match.group(1)} ({match.group(2).rsplit('/', 1)[-1]})"
    return ""


@dataclass(frozen=True)
class DumpedProcess:
    """One process of the job as the dump saw it."""

    node: str
    pid: int
    role: str  # what it is (its command line's program part: 'ray::GpuSlot.step', 'raylet', ...)
    state: str  # /proc state letter: R, S, D (uninterruptible), T (stopped), Z
    frame: str  # innermost_frame of its dump ('' when py-spy could not read it)


def suspects(processes: list[DumpedProcess]) -> tuple[list[str], str]:
    """Nodes the dumps point at, and why: a stopped (T) or uninterruptible (D) process; else, among Ray workers of one
    role on several nodes, the one whose innermost frame is unlike the others' (which wait alike)."""
    frozen = [p for p in processes if p.state in ("T", "t", "D")]
    if frozen:
        return sorted({p.node for p in frozen}), ", ".join(
            f"{p.role} (pid {p.pid}) on {p.node} is {'stopped' if p.state in 'Tt' else 'in D state'}" for p in frozen
        )
    # Only Ray's workers are compared (the ranks: training and generation actors); daemons are one of a kind per
    # node. Ray titles a worker by the method it runs ('ray::GpuSlot.step'): one role per actor class.
    by_role: dict[str, list[DumpedProcess]] = {}
    for p in processes:
        if p.frame and p.role.startswith("ray::"):
            by_role.setdefault(p.role.split(".")[0], []).append(p)
    for role, group in sorted(by_role.items()):
        frames: dict[str, list[DumpedProcess]] = {}
        for p in group:
            frames.setdefault(p.frame, []).append(p)
        if len(group) < 3 or len(frames) != 2:
            continue
        (odd_frame, odd), (common_frame, _) = sorted(frames.items(), key=lambda kv: len(kv[1]))
        if len(odd) == 1 and len(group) - 1 >= 2:
            p = odd[0]
            return [p.node], (
                f"{p.role} (pid {p.pid}) on {p.node} is in {odd_frame} while {len(group) - 1} "
                f"others of {role} wait in {common_frame}"
            )
    return [], "the dumps show no process apart from the others"


def plan_rows(limits: HangLimits, extra_env: dict[str, str]) -> list[tuple[str, str, str]]:
    """`plan`'s rows: the timeout in force and where it comes from, and which of it and NCCL's fires first."""
    rows = [("hang watchdog", "timeout", limits.describe())]
    derived = nccl_timeout_s(limits)
    if derived is None:  # the watchdog is off
        return rows + [("hang watchdog", "NCCL timeout", f"SkyRL's own ({NCCL_TIMEOUT_ENV}, 600 s unless set)")]
    given = extra_env.get(NCCL_TIMEOUT_ENV)
    nccl = int(given) if given not in (None, "") and str(given).isdigit() else derived
    where = (
        "trainer.extra_env"
        if given not in (None, "")
        else f"set by the job: the longest phase + {NCCL_TIMEOUT_MARGIN_S:.0f} s"
    )
    longest = limits.longest_s()
    first = (
        "the watchdog fires first (with stack dumps)"
        if nccl > longest
        else f"NCCL's timeout fires first (below the longest phase, {longest:.0f} s): the rank aborts without dumps "
        f"and the attempt ends as a driver error; raise {NCCL_TIMEOUT_ENV}"
    )
    return rows + [("hang watchdog", "NCCL timeout", f"{NCCL_TIMEOUT_ENV}={nccl} ({where}); {first}")]
