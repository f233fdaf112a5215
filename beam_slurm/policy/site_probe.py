"""What `doctor --probe` measured on the cluster, and what follows from it: a verdict per measurement and the recipe
keys a site profile keeps.

Pure: `beam_slurm.launch.site_probe` submits the probe's jobs and fills `ProbeFindings`; here the numbers are judged
(`ProbeFindings.checks`) and turned into recipe keys (`ProbeFindings.profile_values`). The time-limit notice's lead
and the save's wait are sized by the notice budget with the measured write speed, plus whatever the measured signal
came late, and never below the recipe's own values; the lead stays inside the time limit."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from beam_slurm.policy.doctor import REQUEUE_HOLD_DEGRADED_S, Verdict
from beam_slurm.policy.notice_budget import GB, Budget, recipe_budget, recipe_save_seconds
from beam_slurm.slurm.values import SlurmValueError, describe_seconds, time_limit_seconds

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig

SIGNAL_TOLERANCE_S = 2.0
"""Slurm's end times are whole seconds: a lead up to this much shorter than the one asked for is not late."""
SLURM_EARLY_S = 60.0
"""Slurm documents that `--signal` may come up to this many seconds before the lead asked for."""
LOCAL_WRITE_SLOW_GBYTES_PER_S = 0.5
"""Below this a node's local disk slows Ray's object spilling and a streamed optimizer state."""
QUEUE_WAIT_DEGRADED_S = 600.0
"""A probe job that waited longer than this says the partition is busy now: every requeue waits again."""
CHECK_NAMES = ("signal_lead_measured", "requeue_hold_measured", "shared_write_speed", "local_write_speed", "queue_wait")
AGAIN = "run `beam-slurm doctor --probe` again"


def write_gbytes_per_s(written_bytes: int, seconds: float) -> float | None:
    """Decimal GB per second (as notice_budget counts), None when nothing was written or no time passed."""
    if written_bytes <= 0 or seconds <= 0:
        return None
    return written_bytes / seconds / GB


def late_s(signal_early_s: float | None) -> int:
    """Whole seconds the signal came after the lead asked for (0 when on time, early, or not measured)."""
    if signal_early_s is None or signal_early_s >= -SIGNAL_TOLERANCE_S:
        return 0
    return math.ceil(-signal_early_s)


@dataclass(frozen=True)
class NoticeAdvice:
    """The time-limit notice settings the measurements call for: at least the recipe's, at most inside the limit."""

    signal_before_s: int  # cluster.signal_before_s
    grace_s: int  # cluster.grace_s
    needed_s: float  # step + save at the measured speed + stop Ray + logs + what the signal came late
    limit_s: float | None  # the time limit the lead must stay inside (None: no limit)

    @property
    def fits_limit(self) -> bool:
        """Whether the advised lead comes before the time limit (else no lead fits: the limit must grow)."""
        return math.isfinite(self.needed_s) and (self.limit_s is None or self.signal_before_s < self.limit_s)


def advise_notice(budget: Budget, *, stop_grace_s: float, late_by_s: int, limit_s: float | None) -> NoticeAdvice:
    """The lead and wait for `budget` (its save at the measured speed; its lead and grace the recipe's): the wait
    covers the step and the save, the lead covers everything plus the lateness, and keeps grace + stop_grace inside
    it (as validation asks); neither goes below the recipe's."""
    needed = budget.needed_s + late_by_s
    if not math.isfinite(needed):
        return NoticeAdvice(int(budget.lead_s), int(budget.grace_s), needed, limit_s)
    grace = max(math.ceil(budget.grace_s), math.ceil(budget.step_s + budget.save_s))
    lead = max(math.ceil(budget.lead_s), math.ceil(needed), grace + math.ceil(stop_grace_s) + 1)
    return NoticeAdvice(lead, grace, needed, limit_s)


def _seconds(value: float | None) -> str:
    return "not measured" if value is None else f"{value:,.1f} s"


def _speed(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3g} GB/s"


def _short(value: float) -> float:
    """Three significant digits: a measurement is no more precise, and the profile stays readable."""
    return float(f"{value:.3g}")


@dataclass(frozen=True)
class ProbeFindings:
    """What the probe's jobs measured; None where a measurement is missing (`problems` says why)."""

    signal_asked_s: int  # the lead asked for: --signal=B:USR1@N
    signal_lead_s: float | None  # seconds before the job's end that USR1 arrived
    signal_early_s: float | None  # lead - asked (negative: it came late)
    requeue_hold_s: float | None  # a requeued job's wait until Slurm lets it start again (EligibleTime)
    shared_write_gbytes_per_s: float | None  # one node writing and fsyncing to the checkpoint storage
    local_write_gbytes_per_s: float | None  # the same to the node's local disk
    queue_wait_s: float | None  # submission to the start of the first probe job
    partition: str  # where the probe ran
    problems: tuple[str, ...] = ()  # `<check name>: why it is missing or wrong`, or `probe: ...`
    measured_at: str = ""  # when the probe ran (ISO 8601 with offset)
    requeue_restart_s: float | None = None  # the requeue until the job ran again (the hold + the scheduler's pass)
    signal_arrived: bool | None = None  # False: the job reached its time limit without USR1
    requeue_refused: bool = False  # `scontrol requeue` of the running job was refused
    shared_write_failed: bool = False  # the storage job could not write there (not: did not run)
    local_write_failed: bool = False
    write_bytes: int = 0  # bytes each write measurement wrote and fsynced
    shared_write_dir: str = ""
    local_write_dir: str = ""

    def problem(self, name: str) -> str:
        """Why the check `name` is missing or wrong ('' when the probe said nothing about it)."""
        found = [p.partition(": ")[2] for p in self.problems if p.startswith(f"{name}: ")]
        return "; ".join(found)

    def checks(self, cfg: BeamConfig | None = None) -> list[dict[str, str]]:
        """One row per measurement: name, value, verdict (ok, degraded, broken), meaning, fix. With the recipe the
        write speed is judged by its notice budget."""
        return [
            self._signal_row(),
            self._requeue_row(),
            self._shared_row(cfg),
            self._local_row(),
            self._queue_row(),
        ]

    def notice_advice(self, cfg: BeamConfig) -> NoticeAdvice | None:
        """The notice settings for this recipe at the measured write speed; None without a measured speed."""
        speed = self.shared_write_gbytes_per_s
        if speed is None:
            return None
        budget = dataclasses.replace(recipe_budget(cfg), save_s=recipe_save_seconds(cfg, speed))
        try:
            limit = time_limit_seconds(str(cfg.cluster.time_limit))
        except SlurmValueError:
            limit = None  # validation refuses such a recipe before anything runs
        return advise_notice(
            budget,
            stop_grace_s=cfg.cluster.stop_grace_s,
            late_by_s=late_s(self.signal_early_s),
            limit_s=None if limit is None else float(limit),
        )

    def profile_values(self, cfg: BeamConfig) -> dict[str, object]:
        """Dotted recipe key -> value for a site profile: the partition, the measured write speed, the notice settings
        it calls for (when they fit the time limit), and the other measurements under `site.`; `site.measured` lists
        the keys that come from a measurement."""
        values: dict[str, object] = {}
        measured: list[str] = []

        def keep(key: str, value: object) -> None:
            if value is not None:
                values[key] = value
                measured.append(key)

        if self.partition:
            values["cluster.partition"] = self.partition
        shared = self.shared_write_gbytes_per_s
        keep("cluster.storage_write_gbytes_per_s", None if shared is None else _short(shared))
        advice = self.notice_advice(cfg)
        if advice is not None and advice.fits_limit:
            keep("cluster.signal_before_s", advice.signal_before_s)
            keep("cluster.grace_s", advice.grace_s)
        keep("site.signal_early_s", None if self.signal_early_s is None else round(self.signal_early_s, 1))
        keep("site.requeue_hold_s", None if self.requeue_hold_s is None else round(self.requeue_hold_s, 1))
        local = self.local_write_gbytes_per_s
        keep("site.local_write_gbytes_per_s", None if local is None else _short(local))
        keep("site.queue_wait_s", None if self.queue_wait_s is None else round(self.queue_wait_s, 1))
        values["site.measured"] = measured
        if self.measured_at:
            values["site.measured_at"] = self.measured_at
        return values

    def _row(self, name: str, value: str, verdict: Verdict, meaning: str, fix: str = "") -> dict[str, str]:
        return {"name": name, "value": value, "verdict": verdict, "meaning": meaning, "fix": fix}

    def _missing(self, name: str, what: str) -> dict[str, str]:
        why = self.problem(name) or "the probe did not get that far"
        return self._row(name, "not measured", "degraded", f"{what} was not measured: {why}", AGAIN)

    def _signal_row(self) -> dict[str, str]:
        name, asked = "signal_lead_measured", self.signal_asked_s
        lead, early = self.signal_lead_s, self.signal_early_s
        if self.signal_arrived is False:
            return self._row(
                name,
                "never arrived",
                "broken",
                f"a job asking for --signal=B:USR1@{asked} reached its time limit without USR1: the time-limit "
                f"notice never reaches the training job, so each attempt ends without a save ({self.problem(name)})",
                "ask the administrators why --signal is not delivered to batch shells; meanwhile a smaller "
                "checkpoint.interval bounds what each attempt loses",
            )
        if lead is None or early is None:
            return self._missing(name, "when --signal arrives")
        value = f"{lead:,.0f} s before the end (asked {asked} s)"
        late = late_s(early)
        if late:
            return self._row(
                name,
                value,
                "degraded",
                f"USR1 came {late} s later than asked: a notice leaves less than cluster.signal_before_s for the save",
                f"raise cluster.signal_before_s by {late} s (the profile's value includes it)",
            )
        if early > SLURM_EARLY_S + SIGNAL_TOLERANCE_S:
            return self._row(
                name,
                value,
                "degraded",
                f"USR1 came {early:,.0f} s earlier than asked, more than the {SLURM_EARLY_S:.0f} s Slurm documents: "
                "each attempt stops training that much before its notice needs to",
                "a longer cluster.time_limit makes the early stop a smaller share of each attempt",
            )
        return self._row(
            name,
            value,
            "ok",
            f"USR1 came {early:,.0f} s earlier than asked (Slurm checks every 30 s and may send it up to "
            f"{SLURM_EARLY_S:.0f} s early): a notice gives at least cluster.signal_before_s",
        )

    def _requeue_row(self) -> dict[str, str]:
        name = "requeue_hold_measured"
        if self.requeue_refused:
            return self._row(
                name,
                "refused",
                "broken",
                f"Slurm refused to requeue a running --requeue job ({self.problem(name)}): a job cannot requeue "
                "itself after its notice, so every time limit or failure ends the run",
                "ask the administrators to allow requeues (JobRequeue, the partition's and QOS's settings)",
            )
        hold = self.requeue_hold_s
        if hold is None:
            return self._missing(name, "the requeue hold")
        again = (
            f"; it ran again {self.requeue_restart_s:,.0f} s after the requeue (the hold and the scheduler's next pass)"
            if self.requeue_restart_s is not None
            else ""
        )
        meaning = f"a requeued job may start again {hold:,.0f} s after its requeue (the job-credential window){again}"
        if hold > REQUEUE_HOLD_DEGRADED_S:
            return self._row(
                name,
                _seconds(hold),
                "degraded",
                meaning + ": every requeued attempt waits that long",
                "ask the administrators for a shorter AuthInfo cred_expire (Slurm's default is 120)",
            )
        return self._row(name, _seconds(hold), "ok", meaning)

    def _written(self, where: str) -> str:
        return f"{self.write_bytes / 2**20:,.0f} MiB written and fsynced by one node in {where}"

    def _shared_row(self, cfg: BeamConfig | None) -> dict[str, str]:
        name, speed = "shared_write_speed", self.shared_write_gbytes_per_s
        if self.shared_write_failed:
            return self._row(
                name,
                "cannot write",
                "broken",
                f"the probe job could not write to the checkpoint storage: {self.problem(name)}",
                "make paths.ckpt_path a folder every node can write to",
            )
        if speed is None:
            return self._missing(name, "the checkpoint storage's write speed")
        meaning = f"{self._written(self.shared_write_dir or 'the checkpoint storage')}: {_speed(speed)}"
        advice = None if cfg is None else self.notice_advice(cfg)
        if cfg is None or advice is None:
            return self._row(name, _speed(speed), "ok", meaning)
        meaning += f" (the recipe assumes {cfg.cluster.storage_write_gbytes_per_s:g} GB/s)"
        lead, grace = cfg.cluster.signal_before_s, cfg.cluster.grace_s
        if not advice.fits_limit:
            return self._row(
                name,
                _speed(speed),
                "degraded",
                f"{meaning}: a save on notice needs {describe_seconds(math.ceil(advice.needed_s))}, no lead inside "
                f"cluster.time_limit ({cfg.cluster.time_limit}) fits it",
                "raise cluster.time_limit, or a smaller checkpoint.interval bounds what a notice without a save loses",
            )
        if advice.signal_before_s > lead or advice.grace_s > grace:
            return self._row(
                name,
                _speed(speed),
                "degraded",
                f"{meaning}: the save on notice does not fit cluster.signal_before_s={lead} and "
                f"cluster.grace_s={grace}",
                f"cluster.signal_before_s={advice.signal_before_s} cluster.grace_s={advice.grace_s} "
                "(`doctor --probe --write NAME` keeps them in a site profile)",
            )
        return self._row(name, _speed(speed), "ok", f"{meaning}: the save on notice fits the recipe's notice")

    def _local_row(self) -> dict[str, str]:
        name, speed = "local_write_speed", self.local_write_gbytes_per_s
        if self.local_write_failed:
            return self._row(
                name,
                "cannot write",
                "broken",
                f"the probe job could not write to the node's local disk: {self.problem(name)}",
                "set paths.optimizer_state_disk_dir (or $TMPDIR) to a writable node-local folder",
            )
        if speed is None:
            return self._missing(name, "the node-local disk's write speed")
        meaning = f"{self._written(self.local_write_dir or 'the node-local disk')}: {_speed(speed)}"
        if speed < LOCAL_WRITE_SLOW_GBYTES_PER_S:
            return self._row(
                name,
                _speed(speed),
                "degraded",
                f"{meaning}, below {LOCAL_WRITE_SLOW_GBYTES_PER_S} GB/s: Ray's object spilling and a streamed "
                "optimizer state (paths.optimizer_state_disk_dir) slow down",
                "point paths.optimizer_state_disk_dir (and $TMPDIR) at the nodes' NVMe",
            )
        return self._row(name, _speed(speed), "ok", meaning)

    def _queue_row(self) -> dict[str, str]:
        name, wait = "queue_wait", self.queue_wait_s
        if wait is None:
            return self._missing(name, "the queue wait")
        meaning = f"the first probe job started {wait:,.0f} s after its submission (one node, no GPUs)"
        if wait > QUEUE_WAIT_DEGRADED_S:
            return self._row(
                name,
                _seconds(wait),
                "degraded",
                meaning + ": the partition is busy now; a requeued attempt waits again, and a GPU job longer",
                "another partition (cluster.partition) or a reservation shortens it",
            )
        return self._row(name, _seconds(wait), "ok", meaning)
