"""`doctor --probe`: what Slurm's configuration cannot tell, measured by three small jobs side by side on the recipe's
partition, account and QOS (one node, one CPU, 1 GiB and no GPUs each; a few minutes in all):

    signal   --time=1 --signal=B:USR1@30: how long before the end USR1 really arrives (Slurm may send it early)
    requeue  --requeue, requeued by the probe once it runs: how long Slurm holds it before it may start again
    storage  writes and fsyncs 256 MiB to the checkpoint storage (paths.ckpt_path's parent), then to the node's local
             disk (paths.optimizer_state_disk_dir, else $TMPDIR or /tmp)

and the queue wait (the first submission to the first job's start). The job bodies are short bash scripts rendered
here (every value shell-quoted); they leave `key=value` files in a probe folder on shared storage
(`<paths.export_path's parent>/doctor-probe/<time>/`), which is removed afterwards unless something failed. Every job
carries a submission token in its comment: an interrupted probe (Ctrl-C, SIGTERM) or one out of time cancels all it
queued, a job whose sbatch answer was lost included. Times taken on the nodes and on this host are compared, so their
clocks are taken to be in step (NTP). `beam_slurm.policy.site_probe` judges the numbers."""

from __future__ import annotations

import math
import secrets
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from beam_slurm.config.schema import BeamConfig
from beam_slurm.launch.stages import account_options
from beam_slurm.policy.site_probe import ProbeFindings, write_gbytes_per_s
from beam_slurm.slurm import scheduler, submission
from beam_slurm.slurm.scheduler import SlurmCommandError, SlurmUnreachable
from beam_slurm.slurm.submission import SbatchRequest

__all__ = ["ProbeFindings", "ProbeInterrupted", "probe"]

PROBE_FOLDER = "doctor-probe"  # under the export path's parent, one folder per probe
TOKEN_OWNER = "doctor-probe"  # the probe's jobs' tokens: beam-slurm:doctor-probe:<kind>:<hex>
SIGNAL_ASKED_S = 30
SIGNAL_LIMIT_MIN = 1  # Slurm checks every 30 s: USR1 comes within the first 30 s, as it would for any lead
REQUEUE_LIMIT_MIN = 3
STORAGE_LIMIT_MIN = 5
WRITE_MIB = 256
BLOCK_MIB = 64  # the random block the storage job writes over and over
JOB_MEMORY = "1G"  # asked for: a partition without a default would give each probe job a whole node's memory
POLL_S = 0.5  # between two looks at the probe folder
STATE_EVERY_S = 5.0  # between two squeue calls for the jobs' states
RESULT_GRACE_S = 15.0  # after Slurm shows a job ended, how long its result may take to appear on shared storage
ENDING_S = 30.0  # how long a job that finished its work, or was cancelled, may take to leave squeue's active states
END_TIME_SLACK_S = 300.0  # Slurm's StartTime may precede the script's start by the prolog, not by more


class ProbeInterrupted(KeyboardInterrupt):
    """SIGTERM reached the probe; its jobs were cancelled (raised like Ctrl-C's KeyboardInterrupt)."""


@dataclass
class ProbeJob:
    """One probe job: its sbatch request, the file its script leaves, and what Slurm said of it."""

    kind: str  # signal, requeue or storage
    request: SbatchRequest
    result: Path  # the key=value file the job writes (requeue: one line per start)
    limit_min: int
    script_text: str  # the batch script, written to request.script before submission
    job_id: str = ""
    submitted_at: float = 0.0  # this host's clock, just before sbatch
    ended_seen_at: float | None = None  # when squeue first showed it ended (or forgot it)
    state: str = ""
    done: bool = False  # its result is in (or it is known it never will be)


def _q(value: object) -> str:
    return shlex.quote(str(value))


WAIT_FOR_SIGNALS = "while true; do sleep 1 & wait $!; done"
"""A trap runs only once the foreground command returns; `wait` on a background sleep returns at once on a signal."""


def signal_script(result: Path, asked_s: int) -> str:
    """The signal job: records when USR1 arrives (or TERM at the time limit) with its start and Slurm's end time."""
    return f"""#!/bin/bash
# beam-slurm doctor --probe: when does USR1 of --signal=B:USR1@{int(asked_s)} arrive before the time limit?
result={_q(result)}
start=$(date +%s.%N)
report() {{
    printf 'start=%s\\nend=%s\\npartition=%s\\n%s=%s\\n' "$start" "${{SLURM_JOB_END_TIME:-}}" \\
        "${{SLURM_JOB_PARTITION:-}}" "$1" "$(date +%s.%N)" > "$result.part" && mv "$result.part" "$result"
    exit 0
}}
trap 'report usr1' USR1
trap 'report term' TERM
{WAIT_FOR_SIGNALS}
"""


def requeue_script(starts: Path) -> str:
    """The requeue job: one line per start (restart count, time); the probe requeues the first, the second ends."""
    return f"""#!/bin/bash
# beam-slurm doctor --probe: the probe requeues this job once it runs; its second run ends at once.
echo "restart=${{SLURM_RESTART_COUNT:-0}} at=$(date +%s.%N)" >> {_q(starts)}
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then exit 0; fi
{WAIT_FOR_SIGNALS}
"""


def write_blocks(write_mib: int) -> tuple[int, int]:
    """(block bytes, blocks): what the storage job writes, at least write_mib MiB in blocks of BLOCK_MIB at most."""
    block_mib = max(1, min(BLOCK_MIB, int(write_mib)))
    return block_mib * 2**20, math.ceil(max(1, int(write_mib)) / block_mib)


def storage_script(result: Path, shared_dir: str, local_dir: str | None, write_mib: int) -> str:
    """The storage job: writes and fsyncs the same bytes into a fresh folder on each storage, removes it, and
    records start and end times (or the error)."""
    block_bytes, blocks = write_blocks(write_mib)
    local = _q(local_dir) if local_dir else '"$tmp"'
    return f"""#!/bin/bash
# beam-slurm doctor --probe: write speed of the checkpoint storage and of the node's local disk.
result={_q(result)}
shared={_q(shared_dir)}
start=$(date +%s.%N)
tmp=${{TMPDIR:-/tmp}}
[ -d "$tmp" ] && [ -w "$tmp" ] || tmp=/tmp
local={local}
# Random bytes, written over and over from a block in memory: a file system that compresses would shrink zeros, and
# /dev/urandom itself is slower than fast storage.
block=$(mktemp "$tmp/.beam-doctor-block.XXXXXX") || exit 1
trap 'rm -f "$block"' EXIT
head -c {block_bytes} /dev/urandom > "$block"
measure() {{  # $1: the key, $2: a folder on the storage to measure
    local dir err t0 t1 i
    if ! dir=$(mkdir -p "$2" 2>&1 && mktemp -d "$2/.beam-doctor-write.XXXXXX" 2>&1); then
        echo "$1_error=cannot write in $2: ${{dir//$'\\n'/ }}"
        return
    fi
    t0=$(date +%s.%N)
    if err=$(for ((i = 0; i < {blocks}; i++)); do cat "$block"; done |
        dd of="$dir/data" bs=1M iflag=fullblock conv=fsync status=none 2>&1); then
        t1=$(date +%s.%N)
        printf '%s_bytes=%s\\n%s_start=%s\\n%s_end=%s\\n' "$1" {block_bytes * blocks} "$1" "$t0" "$1" "$t1"
    else
        echo "$1_error=writing $2: ${{err//$'\\n'/ }}"
    fi
    rm -rf "$dir"
}}
{{
    echo "start=$start"
    echo "host=$(hostname)"
    echo "local_dir=$local"
    measure shared "$shared"
    measure local "$local"
}} > "$result.part" && mv "$result.part" "$result"
"""


def probe_folder(cfg: BeamConfig, stamp: str) -> Path:
    """Where the probe's scripts and results go: `<export path's parent>/doctor-probe/<stamp>`, shared storage."""
    export = cfg.paths.export_path or str(Path.home() / "exports" / "probe")
    return Path(export).parent / PROBE_FOLDER / stamp


def shared_write_dir(cfg: BeamConfig, folder: Path) -> str:
    """The checkpoint storage the save goes to: paths.ckpt_path's parent (the run's own folder may not exist yet)."""
    return str(Path(cfg.paths.ckpt_path).parent) if cfg.paths.ckpt_path else str(folder)


def probe_jobs(cfg: BeamConfig, folder: Path, *, write_mib: int, signal_asked_s: int) -> list[ProbeJob]:
    """The three probe jobs' requests (their scripts to be written into `folder`), each with its own token in
    --comment."""
    shared, local = shared_write_dir(cfg, folder), cfg.paths.optimizer_state_disk_dir or None
    scripts = {
        "signal": (signal_script(folder / "signal.result", signal_asked_s), SIGNAL_LIMIT_MIN, "signal.result"),
        "requeue": (requeue_script(folder / "requeue.starts"), REQUEUE_LIMIT_MIN, "requeue.starts"),
        "storage": (storage_script(folder / "storage.result", shared, local, write_mib), STORAGE_LIMIT_MIN, ""),
    }
    jobs = []
    for kind, (text, limit_min, result_name) in scripts.items():
        script = folder / f"{kind}.sh"
        options = [
            f"--job-name=beam-doctor-{kind}",
            "--nodes=1",
            "--ntasks=1",
            "--cpus-per-task=1",
            f"--mem={JOB_MEMORY}",
            f"--time={limit_min}",
            f"--output={folder}/{kind}-%j.out",
            *account_options(cfg),
            *([f"--constraint={cfg.cluster.constraint}"] if cfg.cluster.constraint else []),  # the training nodes
        ]
        options += {"signal": [f"--signal=B:USR1@{int(signal_asked_s)}"], "requeue": ["--requeue"]}.get(kind, [])
        request = SbatchRequest(
            script=str(script), options=options, token=submission.submission_token(TOKEN_OWNER, kind)
        )
        jobs.append(ProbeJob(kind, request, folder / (result_name or f"{kind}.result"), limit_min, text))
    return jobs


def read_pairs(path: Path) -> dict[str, str] | None:
    """A result file's `key=value` lines (None while it is not there)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    return dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)


def read_starts(path: Path) -> dict[int, float]:
    """The requeue job's starts: restart count -> when (its node's clock)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    starts: dict[int, float] = {}
    for line in lines:
        words = dict(word.partition("=")[::2] for word in line.split())
        try:
            starts.setdefault(int(words["restart"]), float(words["at"]))
        except (KeyError, ValueError):
            continue  # a line being written
    return starts


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, the first SIGTERM raises ProbeInterrupted (later ones are ignored, so the cleanup finishes).
    Only the main thread can install a handler; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum: int, frame: object) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise ProbeInterrupted(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class _Probe:
    """One probe's jobs and what was measured so far."""

    cfg: BeamConfig
    folder: Path
    jobs: list[ProbeJob]
    say: Callable[[str], object]
    signal_asked_s: int
    write_mib: int
    problems: list[str] = field(default_factory=list)
    requeued_at: float | None = None
    requeue_refused: bool = False
    requeue_restart_s: float | None = None
    requeue_hold_s: float | None = None

    def job(self, kind: str) -> ProbeJob:
        return next(j for j in self.jobs if j.kind == kind)

    def note(self, check: str, why: str) -> None:
        self.problems.append(f"{check}: {why}")

    def submit(self) -> None:
        for job in self.jobs:
            job.submitted_at = time.time()
            try:
                job.job_id = submission.submit(job.request, notify=self.say)
            except SlurmCommandError as exc:
                job.done = True
                for check in CHECKS_OF[job.kind]:
                    self.note(check, f"the {job.kind} job was not queued: {exc}")
        queued = [f"{j.kind} job {j.job_id}" for j in self.jobs if j.job_id]
        self.say(f"submitted: {', '.join(queued) or 'nothing'}")

    def wait(self, deadline: float) -> bool:
        """Until every job's result is in (True), or the deadline (False); requeues the requeue job once it runs."""
        next_states = 0.0
        while not all(job.done for job in self.jobs):
            now = time.monotonic()
            if now >= deadline:
                self.out_of_time()
                return False
            if now >= next_states:
                next_states = now + STATE_EVERY_S
                self.read_states()
            self.look()
            time.sleep(POLL_S)
        return True

    def read_states(self) -> None:
        try:
            rows = scheduler.comment_rows()
        except SlurmCommandError:
            return  # asked again shortly; the deadline bounds the wait
        states = {job_id: state for job_id, state, _ in rows}
        for job in self.jobs:
            if not job.job_id:
                continue
            job.state = states.get(job.job_id, "")
            if job.state in submission.ACTIVE_STATES:
                job.ended_seen_at = None
            elif job.ended_seen_at is None:
                job.ended_seen_at = time.monotonic()

    def look(self) -> None:
        signal_job, storage, requeue = self.job("signal"), self.job("storage"), self.job("requeue")
        for job in (signal_job, storage):
            if not job.done and job.result.exists():
                job.done = True
        if not requeue.done:
            self.follow_requeue(requeue)
        for job in self.jobs:
            if not job.done and job.ended_seen_at is not None and time.monotonic() - job.ended_seen_at > RESULT_GRACE_S:
                job.done = True
                output = f"{self.folder}/{job.kind}-{job.job_id}.out"
                for check in CHECKS_OF[job.kind]:
                    self.note(check, f"job {job.job_id} ended ({job.state or 'gone'}) without its result; see {output}")

    def follow_requeue(self, job: ProbeJob) -> None:
        starts = read_starts(job.result)
        if self.requeued_at is None and 0 in starts:
            self.requeued_at = time.time()
            try:
                scheduler.requeue(job.job_id)
            except SlurmUnreachable as exc:
                job.done = True
                self.note("requeue_hold_measured", f"Slurm did not answer the requeue of job {job.job_id}: {exc}")
            except SlurmCommandError as exc:
                job.done, self.requeue_refused = True, True
                self.note("requeue_hold_measured", str(exc))
            else:
                self.say(f"requeue job {job.job_id} is running: requeued it (scontrol requeue)")
            return
        restarted = min((at for count, at in starts.items() if count > 0), default=None)
        if self.requeued_at is not None and restarted is not None:
            job.done = True
            self.requeue_restart_s = restarted - self.requeued_at
            self.requeue_hold_s = self.read_hold(job.job_id)

    def read_hold(self, job_id: str) -> float | None:
        """EligibleTime - SubmitTime of the requeued job: Slurm resets SubmitTime at the requeue."""
        try:
            times = scheduler.job_times(job_id)
        except SlurmCommandError as exc:
            self.note("requeue_hold_measured", f"scontrol show job {job_id} failed after the requeue: {exc}")
            return None
        if "EligibleTime" not in times or "SubmitTime" not in times:
            self.note("requeue_hold_measured", f"scontrol show job {job_id} shows no EligibleTime after the requeue")
            return None
        return (times["EligibleTime"] - times["SubmitTime"]).total_seconds()

    def out_of_time(self) -> None:
        waiting = [job for job in self.jobs if not job.done]
        try:
            records = submission.job_records(job.job_id for job in waiting if job.job_id)
        except SlurmCommandError:
            records = {}
        for job in waiting:
            job.done = True
            record = records.get(job.job_id)
            how = "in an unknown state"
            if record is not None:
                how = record.state + (f" ({record.reason})" if record.reason else "")
            for check in CHECKS_OF[job.kind]:
                self.note(check, f"job {job.job_id} was still {how} when the probe's time ran out")

    def active_ids(self) -> list[str] | None:
        """The probe's jobs squeue shows queued, running or completing, found by their tokens (so also one whose
        sbatch answer was lost); None when squeue did not answer."""
        tokens = {job.request.token for job in self.jobs}
        try:
            rows = scheduler.comment_rows()
        except SlurmCommandError:
            return None
        return [
            job_id
            for job_id, state, comment in rows
            if state in submission.ACTIVE_STATES and tokens & set(submission.comment_tokens(comment))
        ]

    def settle(self, limit_s: float) -> list[str] | None:
        """Wait up to limit_s until none of the probe's jobs is active (one that just ended completes a moment
        later); those still active (None: squeue did not answer)."""
        until = time.monotonic() + limit_s
        while True:
            active = self.active_ids()
            if active == [] or time.monotonic() >= until:
                return active
            time.sleep(POLL_S)

    def cancel_leftovers(self) -> list[str]:
        """Cancel every probe job still active, and wait a little for them to end; the ids cancelled."""
        active = self.active_ids()
        if active is None:
            active = sorted(job.job_id for job in self.jobs if job.job_id)  # Slurm did not say: all we know of
        if not active:
            return []
        try:
            scheduler.cancel(*active)
        except SlurmCommandError as exc:
            self.problems.append(f"probe: cancelling job(s) {', '.join(active)} failed: {exc}")
        self.settle(ENDING_S)
        return active

    def findings(self, measured_at: str) -> ProbeFindings:
        signal_lead, signal_early, arrived, partition = self.signal_measurement()
        storage = read_pairs(self.job("storage").result) or {}
        shared, local = (self.write_speed(storage, key) for key in ("shared", "local"))
        block_bytes, blocks = write_blocks(self.write_mib)
        return ProbeFindings(
            signal_asked_s=self.signal_asked_s,
            signal_lead_s=signal_lead,
            signal_early_s=signal_early,
            requeue_hold_s=self.requeue_hold_s,
            shared_write_gbytes_per_s=shared,
            local_write_gbytes_per_s=local,
            queue_wait_s=self.queue_wait(storage),
            partition=self.cfg.cluster.partition or partition,
            problems=tuple(self.problems),
            measured_at=measured_at,
            requeue_restart_s=self.requeue_restart_s,
            signal_arrived=arrived,
            requeue_refused=self.requeue_refused,
            shared_write_failed="shared_error" in storage,
            local_write_failed="local_error" in storage,
            write_bytes=block_bytes * blocks,
            shared_write_dir=shared_write_dir(self.cfg, self.folder),
            local_write_dir=storage.get("local_dir", ""),
        )

    def signal_measurement(self) -> tuple[float | None, float | None, bool | None, str]:
        """(lead, early, whether USR1 came, the partition the job ran in) from the signal job's result."""
        job = self.job("signal")
        found = read_pairs(job.result)
        if not found:
            return None, None, None, ""
        partition = found.get("partition", "")
        start, end = _number(found.get("start")), self.signal_end(job, found)
        usr1, term = _number(found.get("usr1")), _number(found.get("term"))
        if usr1 is not None and end is not None:
            lead = end - usr1
            return lead, lead - self.signal_asked_s, True, partition
        if term is not None and end is not None and term >= end - 5:
            ran = f" (it ran {term - start:.0f} s)" if start is not None else ""
            self.note("signal_lead_measured", f"job {job.job_id} reached its time limit without USR1{ran}")
            return None, None, False, partition
        self.note("signal_lead_measured", f"job {job.job_id} ended before USR1 came (cancelled?)")
        return None, None, None, partition

    def signal_end(self, job: ProbeJob, found: dict[str, str]) -> float | None:
        """When the job's time limit ends: SLURM_JOB_END_TIME (Slurm 23.02 and later), else Slurm's StartTime (the
        prolog included) + the limit, else the script's start + the limit."""
        end, start = _number(found.get("end")), _number(found.get("start"))
        if end is not None or start is None:
            return end
        limit_s = job.limit_min * 60.0
        try:
            started = scheduler.job_times(job.job_id).get("StartTime")
        except SlurmCommandError:
            started = None
        if started is not None and 0 <= start - started.timestamp() <= END_TIME_SLACK_S:
            return started.timestamp() + limit_s
        return start + limit_s

    def write_speed(self, storage: dict[str, str], key: str) -> float | None:
        check = "shared_write_speed" if key == "shared" else "local_write_speed"
        if f"{key}_error" in storage:
            self.note(check, storage[f"{key}_error"])
            return None
        t0, t1 = _number(storage.get(f"{key}_start")), _number(storage.get(f"{key}_end"))
        written = int(_number(storage.get(f"{key}_bytes")) or 0)
        if t0 is None or t1 is None:
            return None
        return write_gbytes_per_s(written, t1 - t0)

    def queue_wait(self, storage: dict[str, str]) -> float | None:
        """The first job's start (any of the three, on its node's clock) after the first submission."""
        signal_found = read_pairs(self.job("signal").result) or {}
        starts = [_number(signal_found.get("start")), _number(storage.get("start"))]
        starts.append(read_starts(self.job("requeue").result).get(0))
        submitted = [job.submitted_at for job in self.jobs if job.job_id]
        known = [s for s in starts if s is not None]
        if not known or not submitted:
            return None
        return max(0.0, min(known) - min(submitted))


CHECKS_OF = {
    "signal": ("signal_lead_measured",),
    "requeue": ("requeue_hold_measured",),
    "storage": ("shared_write_speed", "local_write_speed"),
}
"""The checks each probe job's result answers (queue_wait: any job that started)."""


def describe(cfg: BeamConfig, jobs: list[ProbeJob], shared_dir: str, write_mib: int, signal_asked_s: int) -> str:
    """The line the probe says before it submits anything."""
    c = cfg.cluster
    where = f"partition {c.partition}" if c.partition else "the default partition"
    where += "".join(f", {name} {value}" for name, value in (("account", c.account), ("QOS", c.qos)) if value)
    limits = {job.kind: job.limit_min for job in jobs}
    return (
        f"doctor --probe submits {len(jobs)} jobs of 1 node each (1 CPU, {JOB_MEMORY} memory, no GPUs) to {where}: "
        f"signal (--time={limits['signal']} --signal=B:USR1@{signal_asked_s}), requeue (--time={limits['requeue']}, "
        f"requeued once it runs) and storage (--time={limits['storage']}, writes {write_mib} MiB to {shared_dir} and "
        "to the node's local disk); about a minute once they start, plus the requeue hold; Ctrl-C cancels them"
    )


def probe(
    cfg: BeamConfig,
    *,
    say: Callable[[str], object],
    timeout_s: float = 600,
    write_mib: int = WRITE_MIB,
    signal_asked_s: int = SIGNAL_ASKED_S,
) -> ProbeFindings:
    """Measure what the configuration cannot tell with three small jobs (the module's docstring lists them) and
    return the findings; `say` gets what it will submit first, then its progress. The jobs are cancelled when the
    probe is interrupted (KeyboardInterrupt, SIGTERM: raised again afterwards) or after `timeout_s` (then the
    findings say what is missing). The probe folder stays when something failed."""
    measured_at = datetime.now().astimezone().isoformat(timespec="seconds")
    folder = probe_folder(cfg, f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}")
    jobs = probe_jobs(cfg, folder, write_mib=write_mib, signal_asked_s=signal_asked_s)
    say(describe(cfg, jobs, shared_write_dir(cfg, folder), write_mib, signal_asked_s))
    folder.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        Path(job.request.script).write_text(job.script_text)
    run = _Probe(cfg, folder, jobs, say, signal_asked_s, write_mib)
    deadline = time.monotonic() + timeout_s
    try:
        with sigterm_as_interrupt():
            try:
                run.submit()
                if run.wait(deadline):
                    run.settle(min(ENDING_S, max(0.0, deadline - time.monotonic())))  # they end on their own
            finally:
                cancelled = run.cancel_leftovers()
                if cancelled:
                    say(f"cancelled probe job(s) {', '.join(cancelled)}")
    except BaseException:
        say(f"the probe's files stay in {folder}")
        raise
    findings = run.findings(measured_at)
    if findings.problems:
        say(f"the probe's files stay in {folder} ({len(findings.problems)} problem(s))")
    else:
        remove_folder(folder)
    return findings


def remove_folder(folder: Path) -> None:
    """Remove one probe's folder, and the probes' folder above it once empty."""
    shutil.rmtree(folder, ignore_errors=True)
    try:
        folder.parent.rmdir()
    except OSError:
        pass  # another probe's folder is there, or a file a job wrote late
