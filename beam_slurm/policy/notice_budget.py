"""The notice budget and the checkpoint-interval advice: pure arithmetic, used by `plan` and by the training job.

A notice (the pre-timeout `--signal`, or a preemption that sends one) buys a fixed lead before the kill, in which the
trainer finishes its step and saves, Ray stops and each node's logs are copied: step + save + stop Ray + copy logs <=
lead (and step + save <= cluster.grace_s), with save = checkpoint bytes per node / write bandwidth per node. When it
does not fit, `Budget.fixes` names what does (a smaller interval then bounds the loss).

Interruptions without a notice lose the work since the last checkpoint: with C the save time and M their mean time
apart, saving every t seconds of training wastes about C/(t+C) + (t+C)/2M of GPU time, least near t = sqrt(2CM) - C
(Young 1974, Daly 2006). Notices lose no steps, so they do not enter it.

Nothing here runs commands; the functions taking `cfg` read a loaded recipe and the run's own train_metrics.jsonl (step
time) and ray_stop.json (stop time).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beam_slurm.config.sources import value_source
from beam_slurm.policy.sizing import FULL_CHECKPOINT_TB_TOTAL, full_checkpoint_tb_per_node
from beam_slurm.slurm.values import describe_seconds, time_limit_seconds

if TYPE_CHECKING:
    from beam_slurm.config.schema import BeamConfig
    from beam_slurm.slurm.preemption import PreemptionInfo

GB = 1e9  # decimal, as storage vendors quote bandwidth
DAY_S = 86400.0
STOP_FILE = "ray_stop.json"  # per attempt folder: {"seconds": stop signal -> Ray step ended, "time"}
LORA_TRAINABLE_SHARE_PER_RANK = 2 / 7168
"""LoRA's share of the base's parameters per unit of rank: rank x (in + out) / (in x out) with in ~ out ~ 7,168 (the
seed gives no layer sizes); rank 64 -> ~1.8% of the seed's full 7 TB checkpoint."""


def save_seconds(bytes_per_node: float, write_gbytes_per_s: float) -> float:
    if bytes_per_node <= 0:
        return 0.0
    if write_gbytes_per_s <= 0:
        return math.inf
    return bytes_per_node / (write_gbytes_per_s * GB)


@dataclass(frozen=True)
class Budget:
    """One notice's budget: what must happen between the notice and the kill, in seconds."""

    lead_s: float  # notice to kill: cluster.signal_before_s, or a preemption's GraceTime
    step_s: float  # the trainer saves at the next step boundary
    save_s: float
    stop_s: float  # stopping Ray on every node (cluster.stop_grace_s)
    log_copy_s: float  # cluster.log_copy_s
    grace_s: float = math.inf  # how long the job waits for the save (cluster.grace_s)

    @property
    def needed_s(self) -> float:
        return self.step_s + self.save_s + self.stop_s + self.log_copy_s

    @property
    def save_window_s(self) -> float:
        return self.lead_s - self.step_s - self.stop_s - self.log_copy_s

    @property
    def save_allowance_s(self) -> float:
        """Seconds the save may take: what the lead leaves, and no more than the job waits after the step."""
        return min(self.save_window_s, self.grace_s - self.step_s)

    @property
    def fits_lead(self) -> bool:
        return self.needed_s <= self.lead_s

    @property
    def fits_grace(self) -> bool:
        return self.step_s + self.save_s <= self.grace_s

    @property
    def fits(self) -> bool:
        return self.fits_lead and self.fits_grace

    def summary(self) -> str:
        """`step 600 s + save 900 s + stop Ray 45 s + logs 30 s = 1,575 s > lead 300 s`."""
        sign = "<=" if self.fits_lead else ">"
        parts = [f"step {self.step_s:,.0f} s", f"save {_s(self.save_s)}"]
        parts += [f"stop Ray {self.stop_s:,.0f} s"] if self.stop_s else []
        parts += [f"logs {self.log_copy_s:,.0f} s"] if self.log_copy_s else []
        return f"{' + '.join(parts)} = {_s(self.needed_s)} {sign} lead {self.lead_s:,.0f} s"

    def fixes(
        self,
        *,
        bytes_per_node: float,
        interval_steps: int,
        lead_key: str = "cluster.signal_before_s",
        limit_s: float | None = None,
    ) -> list[str]:
        """Each fix names its setting; `limit_s`: the time limit, which a time-limit notice's lead must stay inside."""
        if self.fits:
            return []
        out = []
        if not self.fits_lead:
            lead = math.ceil(self.needed_s)
            if lead_key == "cluster.signal_before_s" and limit_s is not None and lead >= limit_s:
                out.append(
                    f"no lead fits: the save needs {_s(lead)}, the time limit is {_s(limit_s)}; raise "
                    "cluster.time_limit first"
                )
            elif lead_key == "cluster.signal_before_s":
                out.append(
                    f"a larger lead: cluster.signal_before_s={lead} with #SBATCH --signal=B:USR1@{lead} and "
                    f"cluster.grace_s={math.ceil(self.step_s + self.save_s)}"
                )
            else:
                out.append(f"a longer {lead_key} (>= {lead} s; the cluster's administrators set it)")
            if self.save_window_s > 0 and bytes_per_node > 0:
                out.append(
                    f"faster storage: >= {bytes_per_node / self.save_window_s / GB:.1f} GB/s per node saves "
                    f"{bytes_per_node / GB:,.0f} GB in the {self.save_window_s:.0f} s the lead leaves"
                )
            else:
                out.append(
                    f"no storage is fast enough: the {self.lead_s:,.0f} s lead leaves no time for a save "
                    "after the step in progress"
                )
        elif not self.fits_grace:
            out.append(
                f"cluster.grace_s={math.ceil(self.step_s + self.save_s)} (the job waits {self.grace_s:.0f} s "
                "for the save)"
            )
        out.append(
            f"a smaller checkpoint.interval (now {interval_steps}): a notice that cannot save loses the steps "
            "since the last periodic checkpoint"
        )
        return out


def waste_share(interval_s: float, save_s: float, mtbf_s: float) -> float:
    """Share of GPU time spent saving plus redoing lost work, checkpointing every interval_s seconds of training."""
    if interval_s <= 0:
        return math.inf
    segment = interval_s + save_s
    loss = segment / (2 * mtbf_s) if math.isfinite(mtbf_s) else 0.0
    return save_s / segment + loss


def young_daly_s(save_s: float, mtbf_s: float) -> float:
    """The checkpoint interval (seconds of training) with the least expected waste: sqrt(2 C M) - C for C < 2 M."""
    if not math.isfinite(mtbf_s):
        return math.inf
    if save_s <= 0:
        return 0.0
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    return math.sqrt(2 * save_s * mtbf_s) - save_s


@dataclass(frozen=True)
class IntervalAdvice:
    advised_steps: int
    configured_steps: int
    advised_waste: float  # share of GPU time lost to saves and redone steps
    configured_waste: float
    optimum_s: float  # Young/Daly's continuous optimum (inf: no interruptions without notice expected)


def advise_interval(
    *, save_s: float, step_s: float, interruptions_per_day: float, configured_steps: int, max_steps: int
) -> IntervalAdvice:
    mtbf = DAY_S / interruptions_per_day if interruptions_per_day > 0 else math.inf
    top = max(max_steps, 1)
    best = min(range(1, top + 1), key=lambda k: (waste_share(k * step_s, save_s, mtbf), -k))
    return IntervalAdvice(
        advised_steps=best,
        configured_steps=configured_steps,
        optimum_s=young_daly_s(save_s, mtbf),
        advised_waste=waste_share(best * step_s, save_s, mtbf),
        configured_waste=waste_share(min(configured_steps, top) * step_s, save_s, mtbf),
    )


def measured_step_seconds(metrics_file: Path) -> float | None:
    """Median seconds between consecutive steps of one attempt in a run's train_metrics.jsonl; None without two."""
    try:
        lines = Path(metrics_file).read_text().splitlines()
    except OSError:
        return None
    previous: dict[Any, tuple[int, float]] = {}  # attempt -> its last (step, time)
    gaps: list[float] = []
    for line in lines:
        try:
            row = json.loads(line)
            step, when, attempt = int(row["step"]), float(row["time"]), row.get("attempt", 0)
        except (ValueError, KeyError, TypeError):
            continue
        last = previous.get(attempt)
        if last is not None and step == last[0] + 1 and when > last[1]:
            gaps.append(when - last[1])
        previous[attempt] = (step, when)
    return statistics.median(gaps) if gaps else None


def measured_stop_seconds(log_dir: Path) -> tuple[float, int] | None:
    """(median seconds the run's attempts took to stop the Ray step, how many stops), None before the first."""
    seconds = []
    for path in Path(log_dir).glob(f"*/{STOP_FILE}"):
        try:
            seconds.append(float(json.loads(path.read_text())["seconds"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return (statistics.median(seconds), len(seconds)) if seconds else None


def checkpoint_bytes_per_node(cfg: BeamConfig) -> tuple[float, str]:
    if cfg.checkpoint.gbytes_per_node is not None:
        return cfg.checkpoint.gbytes_per_node * GB, "checkpoint.gbytes_per_node"
    if cfg.trainer.backend == "rehearsal":
        return float(cfg.trainer.rehearsal_save_bytes), "trainer.rehearsal_save_bytes (rehearsal)"
    if cfg.is_lora:
        share = LORA_TRAINABLE_SHARE_PER_RANK * cfg.lora.rank
        total = FULL_CHECKPOINT_TB_TOTAL * 1000 * GB * share
        return total / max(cfg.training_nodes, 1), f"LoRA rank {cfg.lora.rank}: ~{share:.1%} of a full checkpoint"
    return full_checkpoint_tb_per_node(
        cfg
    ) * 1000 * GB, f"seed: {FULL_CHECKPOINT_TB_TOTAL:.0f} TB over the training nodes"


def step_seconds(cfg: BeamConfig) -> tuple[float, str]:
    """Seconds per step: measured from the run's train_metrics.jsonl once it has steps, else the recipe's estimate."""
    if cfg.trainer.backend == "rehearsal":
        return float(cfg.trainer.rehearsal_step_s), "trainer.rehearsal_step_s (rehearsal)"
    if cfg.paths.export_path:
        measured = measured_step_seconds(Path(cfg.paths.export_path) / "train_metrics.jsonl")
        if measured is not None:
            return measured, "measured from train_metrics.jsonl"
    return float(cfg.trainer.expected_step_s), "trainer.expected_step_s (estimate)"


def stop_seconds(cfg: BeamConfig) -> tuple[float, float, str]:
    """Measured over the run's own stops (the two together, as the job times them), else the recipe's allowances."""
    measured = measured_stop_seconds(Path(cfg.paths.log_dir)) if cfg.paths.log_dir else None
    if measured is not None:
        return measured[0], 0.0, f"measured: median of this run's {measured[1]} stops, logs copied included"
    return (
        float(cfg.cluster.stop_grace_s),
        float(cfg.cluster.log_copy_s),
        "allowances: cluster.stop_grace_s + cluster.log_copy_s, until the run has stopped once",
    )


def recipe_save_seconds(cfg: BeamConfig, write_gbytes_per_s: float | None = None) -> float:
    bandwidth = cfg.cluster.storage_write_gbytes_per_s if write_gbytes_per_s is None else write_gbytes_per_s
    return max(save_seconds(checkpoint_bytes_per_node(cfg)[0], bandwidth), min_save_seconds(cfg))


def min_save_seconds(cfg: BeamConfig) -> float:
    """The rehearsal's save lasts at least trainer.rehearsal_save_s; a real trainer's has no floor."""
    return float(cfg.trainer.rehearsal_save_s) if cfg.trainer.backend == "rehearsal" else 0.0


def recipe_budget(cfg: BeamConfig) -> Budget:
    """The budget of this recipe's time-limit notice (cluster.signal_before_s before the kill)."""
    stop_s, log_copy_s, _ = stop_seconds(cfg)
    c = cfg.cluster
    return Budget(
        lead_s=float(c.signal_before_s),
        step_s=step_seconds(cfg)[0],
        save_s=recipe_save_seconds(cfg),
        stop_s=stop_s,
        log_copy_s=log_copy_s,
        grace_s=float(c.grace_s),
    )


@dataclass(frozen=True)
class SaveCost:
    """What one save on notice costs: `plan` and the training job build their preemption budgets from it alike."""

    step_s: float
    bytes_per_node: float
    min_save_s: float
    write_gbytes_per_s: float  # used where nothing was measured
    job_grace_s: float

    @classmethod
    def of(cls, cfg: BeamConfig) -> SaveCost:
        return cls(
            step_s=step_seconds(cfg)[0],
            bytes_per_node=checkpoint_bytes_per_node(cfg)[0],
            min_save_s=min_save_seconds(cfg),
            write_gbytes_per_s=float(cfg.cluster.storage_write_gbytes_per_s),
            job_grace_s=float(cfg.cluster.grace_s),
        )

    def preemption_budget(self, grace_s: float, measured_gbytes_per_s: float | None = None) -> Budget:
        """Only step + save must fit: after a complete save the kill loses nothing (stop and log copy may be cut)."""
        rate = self.write_gbytes_per_s if measured_gbytes_per_s is None else measured_gbytes_per_s
        save = max(save_seconds(self.bytes_per_node, rate), self.min_save_s)
        return Budget(
            lead_s=float(grace_s), step_s=self.step_s, save_s=save, stop_s=0.0, log_copy_s=0.0, grace_s=self.job_grace_s
        )


def term_notice(
    info: PreemptionInfo, qos: str | None, cost: SaveCost, measured_gbytes_per_s: float | None = None
) -> tuple[bool, str]:
    """Whether a preemption's first SIGTERM (it reaches only the job's tasks) is a notice, and why: step + save fit."""
    if not info.reachable:
        return False, f"Slurm did not say how a preemption comes ({info.why})"
    if not info.preemptable(qos):
        return False, f"partition {info.partition} is not preemptable"
    mode = info.mode(qos)
    if mode.startswith("SUSPEND"):
        return False, f"a preemption suspends the job (PreemptMode={mode})"
    grace = info.grace_s(qos)
    if grace <= 0:
        return False, "GraceTime 0: a preemption kills at once"
    budget = cost.preemption_budget(grace, measured_gbytes_per_s)
    summary = budget.summary().replace(" lead ", " GraceTime ")
    if not budget.fits:
        if not budget.fits_lead:
            return False, f"{summary}: the save does not fit"
        return False, f"step + save > cluster.grace_s {budget.grace_s:,.0f} s: the job would not wait for the save"
    return True, summary


def preflight_budget(cfg: BeamConfig) -> dict[str, Any]:
    """What the job's preflight checks the measured bandwidth against: bytes per node and the seconds for the save."""
    return {
        "save_bytes_per_node": int(checkpoint_bytes_per_node(cfg)[0]),
        "save_window_s": recipe_budget(cfg).save_allowance_s,
    }


def recipe_advice(cfg: BeamConfig) -> IntervalAdvice:
    return advise_interval(
        save_s=recipe_save_seconds(cfg),
        step_s=step_seconds(cfg)[0],
        interruptions_per_day=cfg.cluster.interruptions_per_day,
        configured_steps=cfg.checkpoint.interval,
        max_steps=cfg.max_training_steps,
    )


@dataclass(frozen=True)
class AttemptProgress:
    """How far one attempt gets inside its time limit: bring-up, model load, then steps and saves until the notice."""

    limit_s: float | None
    start_s: float  # bring-up and model load before the first step
    step_s: float
    save_s: float
    lead_s: float
    interval: int
    max_steps: int
    notice_save_fits: bool

    @property
    def train_s(self) -> float:
        return math.inf if self.limit_s is None else self.limit_s - self.lead_s - self.start_s

    @property
    def steps(self) -> int | float:
        """Steps one attempt trains before its notice (saves included); inf without a limit."""
        if self.limit_s is None:
            return math.inf
        if self.train_s <= 0 or self.step_s <= 0:
            return 0
        cycle = self.interval * self.step_s + self.save_s
        whole, rest = divmod(self.train_s, cycle)
        return int(whole) * self.interval + min(self.interval, int(rest // self.step_s))

    @property
    def finishes_in_one(self) -> bool:
        return self.steps >= self.max_steps

    @property
    def reaches_checkpoint(self) -> bool:
        return self.steps >= self.interval and self.train_s >= self.interval * self.step_s + self.save_s

    @property
    def stalls(self) -> bool:
        """No attempt can make progress: it neither finishes, nor reaches a checkpoint, nor saves on its notice."""
        return not (self.finishes_in_one or self.reaches_checkpoint or (self.notice_save_fits and self.steps >= 1))

    def fixes(self) -> list[str]:
        needed = self.start_s + self.interval * self.step_s + self.save_s + self.lead_s
        out = [
            f"a longer limit: cluster.time_limit >= {math.ceil(needed / 60)} "
            f"(minutes; {describe_seconds(int(needed))}) reaches the first checkpoint"
        ]
        if self.steps >= 1:
            out.append(f"a smaller interval: checkpoint.interval={int(self.steps)} (the steps one attempt trains)")
        if self.limit_s is not None and self.step_s + self.save_s < self.limit_s - self.start_s:
            out.append(
                "a notice lead that fits inside the limit, for a save on notice: cluster.signal_before_s >= "
                f"{math.ceil(self.step_s + self.save_s)} (see the time-limit notice row)"
            )
        return out

    def rows(self) -> list[tuple[str, str, str]]:
        if self.limit_s is None:
            return [("notice", "one attempt", "no time limit: an attempt trains until the run ends")]
        head = (
            f"{describe_seconds(int(self.limit_s))} limit - {_s(self.start_s)} bring-up and model load - "
            f"{self.lead_s:,.0f} s notice lead = {_s(max(self.train_s, 0))} of steps of {self.step_s:,.0f} s: "
        )
        if self.finishes_in_one:
            return [("notice", "one attempt", head + f"all {self.max_steps} steps fit in one attempt")]
        if not self.stalls:
            got = (
                f"{self.steps} steps, {int(self.steps // self.interval)} periodic checkpoint(s)"
                if self.reaches_checkpoint
                else f"{self.steps} step(s), then a save on the notice"
            )
            return [("notice", "one attempt", head + got)]
        return [
            (
                "notice",
                "one attempt",
                head + f"AN ATTEMPT CANNOT REACH A CHECKPOINT: {self.steps} step(s) before "
                f"the notice, the first checkpoint is at step {self.interval} and the save on notice does not fit; "
                "every attempt would redo the same steps",
            ),
            ("notice", "  fix", "; or ".join(self.fixes())),
        ]


def attempt_progress(cfg: BeamConfig) -> AttemptProgress:
    c, t = cfg.cluster, cfg.trainer
    limit = time_limit_seconds(str(c.time_limit))  # the function reads str(); None stays refused
    # The rehearsal loads no model: its own load time stands in (as its step time does in step_seconds).
    load_s = t.rehearsal_model_load_s if t.backend == "rehearsal" else t.expected_model_load_s
    return AttemptProgress(
        limit_s=None if limit is None else float(limit),
        start_s=float(t.expected_bringup_s + load_s),
        step_s=step_seconds(cfg)[0],
        save_s=recipe_save_seconds(cfg),
        lead_s=float(c.signal_before_s),
        interval=int(cfg.checkpoint.interval),
        max_steps=int(cfg.max_training_steps),
        notice_save_fits=recipe_budget(cfg).fits,
    )


def _s(seconds: float) -> str:
    return "never (no bandwidth)" if not math.isfinite(seconds) else f"{seconds:,.0f} s"


def plan_rows(cfg: BeamConfig, preemption: PreemptionInfo | None = None) -> list[tuple[str, str, str]]:
    """(section, item, value) rows of `plan`; `preemption`: a `slurm.preemption.PreemptionInfo`, None = not asked."""
    c = cfg.cluster
    size, size_from = checkpoint_bytes_per_node(cfg)
    step, step_from = step_seconds(cfg)
    save = recipe_save_seconds(cfg)
    interval = cfg.checkpoint.interval
    source = value_source(cfg, "cluster.storage_write_gbytes_per_s")  # a variable's, or a profile's (measured?)
    bandwidth_from = f"; {source}" if source else ""
    rows = [
        (
            "notice",
            "save",
            f"{size / GB:,.1f} GB per training node ({size_from}) at "
            f"{c.storage_write_gbytes_per_s:g} GB/s (cluster.storage_write_gbytes_per_s{bandwidth_from}) = {_s(save)}",
        ),
        ("notice", "step", f"{step:,.0f} s ({step_from})"),
    ]
    stop_s, log_copy_s, stop_from = stop_seconds(cfg)
    rows.append(
        (
            "notice",
            "stop",
            f"stop Ray {stop_s:,.0f} s"
            + (f" + copy logs {log_copy_s:,.0f} s" if log_copy_s else "")
            + f" ({stop_from})",
        )
    )
    budget = recipe_budget(cfg)
    progress = attempt_progress(cfg)
    rows += _verdict_rows("time-limit notice", "", budget, size, interval, "cluster.signal_before_s", progress.limit_s)
    rows += progress.rows()
    if preemption is not None:
        line, preemption_budget = _preemption_line(cfg, preemption, interval)
        lead_key = f"GraceTime of partition {preemption.partition}"
        rows += (
            _verdict_rows("preemption", line, preemption_budget, size, interval, lead_key)
            if preemption_budget is not None
            else [("notice", "preemption", line)]
        )
    advice = recipe_advice(cfg)
    if cfg.cluster.interruptions_per_day > 0:
        optimum = (
            f"Young/Daly optimum {advice.optimum_s / step:.1f} steps"
            if step > 0 and math.isfinite(advice.optimum_s)
            else ""
        )
        rows.append(
            (
                "notice",
                "interval advice",
                f"every {advice.advised_steps} steps: {advice.advised_waste:.1%} of GPU time to saves and redone "
                f"steps; configured every {advice.configured_steps}: {advice.configured_waste:.1%} ({optimum}; "
                f"{c.interruptions_per_day:g} interruptions without notice per day, cluster.interruptions_per_day)",
            )
        )
    else:
        rows.append(
            (
                "notice",
                "interval advice",
                "no interruptions without notice expected "
                "(cluster.interruptions_per_day=0): save as rarely as you like; notices save on their own",
            )
        )
    return rows


def _verdict_rows(
    item: str, head: str, budget: Budget, size: float, interval: int, lead_key: str, limit_s: float | None = None
) -> list[tuple[str, str, str]]:
    if budget.fits:
        return [("notice", item, f"{head}{budget.summary()}: fits")]
    why = (
        budget.summary()
        if not budget.fits_lead
        else (f"step {budget.step_s:,.0f} s + save {_s(budget.save_s)} > cluster.grace_s {budget.grace_s:,.0f} s")
    )
    fixes = budget.fixes(bytes_per_node=size, interval_steps=interval, lead_key=lead_key, limit_s=limit_s)
    return [
        (
            "notice",
            item,
            f"{head}DOES NOT FIT: {why}; the save is cut off and the next attempt resumes from "
            f"the last complete checkpoint (up to {interval} steps redone)",
        ),
        ("notice", "  fix", "; or ".join(fixes)),
    ]


def _preemption_line(cfg: BeamConfig, info: PreemptionInfo, interval: int) -> tuple[str, Budget | None]:
    """The preemption line, and the budget to check when a preemption comes with a notice (else None)."""
    if not info.reachable:
        if info.why.startswith("Slurm has no partition"):  # Slurm answered: the setting is wrong, not the network
            return f"{info.why}: how a preemption reaches the job is not checked", None
        return f"Slurm not reachable here ({info.why}): how a preemption reaches the job is not checked", None
    qos = cfg.cluster.qos
    where = f"partition {info.partition}" + (f", QOS {qos or 'normal'}" if info.by_qos else "")
    if not info.preemptable(qos):
        return (
            f"{where}: not preemptable (PreemptType={info.preempt_type or '?'}, PreemptMode={info.mode(qos) or '?'})"
        ), None
    mode = info.mode(qos)
    after = {
        "CANCEL": "then the job is cancelled, not requeued: resubmit it",
        "SUSPEND": "the job is suspended, nothing is lost (its GPUs stay held)",
    }.get(mode.split(",")[0], "then Slurm requeues the job")
    grace = info.grace_s(qos)
    lost = (
        f"lost: the steps since the last checkpoint, up to {interval} (checkpoint.interval), "
        f"~{interval / 2:g} on average"
    )
    head = f"{where}, PreemptMode={mode}, GraceTime {grace} s; {after}. "
    if mode.startswith("SUSPEND"):
        return head.rstrip(". "), None
    if grace <= 0:
        return head + f"A preemption comes WITHOUT a notice (GraceTime 0): {lost}", None
    budget = SaveCost.of(cfg).preemption_budget(grace)
    if not info.user_signal:
        # The job's Ray step holds that SIGTERM and relays it as a notice only when the save fits (`term_notice`).
        if not budget.fits:
            return head + (
                "A preemption comes WITHOUT a notice: without SlurmctldParameters=preempt_send_user_signal "
                "the first SIGTERM reaches only the job's tasks, and the step and the save do not fit in "
                f"the GraceTime ({budget.summary()}), so the Ray step stops at once; {lost}. Fix: ask the "
                "administrators for preempt_send_user_signal and a longer GraceTime, or lower "
                "checkpoint.interval"
            ), None
        caveat = (
            ""
            if "cgroup" not in info.proctrack
            else f" (with {info.proctrack} that SIGTERM is expected to reach Ray's own processes too, and then Ray "
            "stops and nothing is saved: ask for preempt_send_user_signal to be sure)"
        )
        return head + (
            "Without preempt_send_user_signal the first SIGTERM reaches only the job's tasks: the Ray "
            f"step holds it and the job saves as on a notice{caveat}, because the step and the save fit: "
        ), budget
    return head + "USR1 reaches the batch shell at once (preempt_send_user_signal): ", budget
