"""Preflight: one quick step on every node of the allocation before Ray starts. `python -m
beam_slurm.jobs.training.preflight
'<PreflightSettings as JSON>'` runs once per node and prints one line `BEAM_PREFLIGHT {"host": ..., "problems": [...]}`;
the batch shell collects the lines (`run_step`) and ends the job naming each failing node and reason, before GPUs are
held idle by a job that would fail an hour later."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beam_slurm.config.ray import RaySettings
from beam_slurm.jobs.ray_cluster import fabric
from beam_slurm.jobs.ray_cluster.gpus import allocated_gpus
from beam_slurm.jobs.training import storage_probe

logger = logging.getLogger(__spec__.name)  # its package name under `python -m` too (__name__ is "__main__")

if TYPE_CHECKING:
    from beam_slurm.jobs.training.steps import StepLauncher

RESULT_PREFIX = "BEAM_PREFLIGHT "  # starts each node's one result line
PREFLIGHT_TIMEOUT_S = 300.0  # nodes silent by then fail (a hung mount)
GB = 1024**3


@dataclass
class PreflightSettings:
    """What the preflight step checks on every node. An empty or zero field skips its check."""

    readable_paths: list[str] = field(default_factory=list)  # the model, the data files
    skyrl_dir: str = ""  # SkyRL checkout that the driver runs from (must hold pyproject.toml and the examples/ folder)
    scratch_dir: str = ""  # node-local, for offloaded optimizer state; created
    scratch_need_bytes: int = 0  # ~0.6-0.7 TB per node for full fine-tuning
    host_ram_need_bytes: int = 0  # when the optimizer runs on CPU (~1.7 TB)
    ckpt_dir: str = ""  # Checkpoint folder on shared storage (CKPT_PATH); created if missing
    ckpt_need_bytes: int = 0  # ~0.9 TB per node per kept checkpoint
    shared_canary: str = ""  # written just before the step: proves the storage is shared
    gpus_per_node: int = 0  # GPUs the step must see on each node (CUDA_VISIBLE_DEVICES / SLURM_STEP_GPUS)
    save_bytes_per_node: int = 0  # a save slower than save_window_s warns
    save_window_s: float = 0.0  # Seconds a notice leaves for the save (`beam_slurm.policy.notice_budget`)
    storage_probe_s: float = 0.0  # Seconds the write probe runs at most (cluster.storage_probe_s); 0 skips it
    fabric: dict = field(default_factory=dict)  # FabricSettings as a dict; empty skips

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(_existing_parent(path)).free


def _available_ram_bytes() -> int:
    lines = Path("/proc/meminfo").read_text().splitlines()
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("MemAvailable:")), 0)


def check_node(settings: PreflightSettings, environ: dict[str, str] | None = None) -> list[str]:
    """Every problem found on this node, each a sentence with the fix."""
    problems: list[str] = []
    for raw in settings.readable_paths:
        path = Path(raw)
        if not path.exists():
            problems.append(f"{raw} does not exist here (not mounted on this node?)")
        elif not os.access(path, os.R_OK) or (path.is_dir() and not os.access(path, os.X_OK)):
            problems.append(f"{raw} is not readable by uid {os.getuid()}")
        elif path.is_dir():
            try:
                next(os.scandir(path), None)
            except OSError as exc:
                problems.append(f"{raw} cannot be listed: {exc.strerror}")
    if settings.skyrl_dir:
        root = Path(settings.skyrl_dir)
        missing = [name for name in ("pyproject.toml", "examples") if not (root / name).exists()]
        if missing:
            problems.append(
                f"SkyRL checkout {root} lacks {', '.join(missing)}; clone SkyRL there (same path on every "
                "node) or fix the SkyRL checkout setting"
            )
    if settings.scratch_dir:
        scratch = Path(settings.scratch_dir)
        try:
            scratch.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problems.append(f"scratch dir {scratch} cannot be created: {exc.strerror}")
        else:
            if not os.access(scratch, os.W_OK):
                problems.append(f"scratch dir {scratch} is not writable")
            elif settings.scratch_need_bytes and _free_bytes(scratch) < settings.scratch_need_bytes:
                problems.append(
                    f"scratch dir {scratch} has {_free_bytes(scratch) / GB:.1f} GiB free, the optimizer "
                    f"state needs {settings.scratch_need_bytes / GB:.1f} GiB"
                )
    if settings.host_ram_need_bytes and _available_ram_bytes() < settings.host_ram_need_bytes:
        problems.append(
            f"host has {_available_ram_bytes() / GB:.1f} GiB RAM available, the CPU optimizer needs "
            f"{settings.host_ram_need_bytes / GB:.1f} GiB"
        )
    if settings.ckpt_dir:
        ckpt = Path(settings.ckpt_dir)
        parent = _existing_parent(ckpt)
        if not os.access(parent, os.W_OK):
            problems.append(f"checkpoint dir {ckpt} is not writable (nearest existing folder {parent})")
        elif settings.ckpt_need_bytes and _free_bytes(ckpt) < settings.ckpt_need_bytes:
            problems.append(
                f"checkpoint storage {ckpt} has {_free_bytes(ckpt) / GB:.1f} GiB free, the kept "
                f"checkpoints need {settings.ckpt_need_bytes / GB:.1f} GiB"
            )
    if settings.shared_canary and not Path(settings.shared_canary).exists():
        problems.append(
            f"{settings.shared_canary} (written by the batch host) is not visible here: the log "
            "folder is not on storage shared by all nodes"
        )
    if settings.gpus_per_node:
        gpus, source = allocated_gpus(environ)
        if len(gpus) != settings.gpus_per_node:
            problems.append(
                f"step sees {len(gpus)} GPUs ({source or 'no CUDA_VISIBLE_DEVICES/SLURM_STEP_GPUS'}), "
                f"expected {settings.gpus_per_node}; request --gpus-per-node={settings.gpus_per_node}"
            )
        elif shutil.which("nvidia-smi"):
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
            count = sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))
            if listed.returncode != 0 or count < settings.gpus_per_node:
                problems.append(
                    f"nvidia-smi lists {count} GPUs (status {listed.returncode}), expected "
                    f"{settings.gpus_per_node}: driver or device problem on this node"
                )
    return problems


def collect_results(output: str, expected_hosts: list[str]) -> dict[str, list[str]]:
    """Problems by host from the step's output; a host that printed no result line is itself a problem."""
    records = (json.loads(line[len(RESULT_PREFIX) :]) for line in output.splitlines() if line.startswith(RESULT_PREFIX))
    results = {record["host"]: list(record["problems"]) for record in records}
    for host in expected_hosts:
        results.setdefault(host, ["preflight did not report (the task failed to start or crashed)"])
    return {host: problems for host, problems in results.items() if problems}


def run_step(
    launcher: StepLauncher,
    checks: PreflightSettings,
    hosts: list[str],
    env: dict[str, str],
    attempt_dir: Path,
    ray: RaySettings,
) -> list[str]:
    """Run the preflight step on every node and log each failing node and problem; the failing nodes. `hosts`:
    the step's nodes in order, [] when srun picks them (then only the count of reports is checked)."""
    if checks.fabric.get("enabled") and env.get("SLURM_JOB_ID"):
        checks = dataclasses.replace(checks, fabric=fabric.with_job_port(checks.fabric, ray, env["SLURM_JOB_ID"]))
    argv = launcher.module_argv(
        ["beam_slurm.jobs.training.preflight", checks.to_json()], kill_on_bad_exit=False, name="preflight"
    )
    started = time.time()
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=PREFLIGHT_TIMEOUT_S)
        stdout, stderr = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        # A hung file system check is itself the finding: the nodes that did not answer are named below.
        stdout = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = f"preflight timed out after {PREFLIGHT_TIMEOUT_S:.0f}s\n"
    failures = collect_results(stdout, hosts)
    reported = stdout.count(RESULT_PREFIX)
    if not hosts and reported < launcher.nodes:
        failures["(unnamed)"] = [f"only {reported} of {launcher.nodes} nodes reported"]
    if stderr.strip():
        (attempt_dir / "preflight.stderr").write_text(stderr)
    if checks.fabric.get("enabled"):
        for host, problems in fabric.report(stdout, RESULT_PREFIX, checks.fabric, attempt_dir).items():
            failures.setdefault(host, []).extend(problems)
    if checks.ckpt_dir:
        rates = storage_probe.gather(storage_probe.records_from_output(stdout, RESULT_PREFIX), attempt_dir)
        storage_probe.check_budget(rates, checks.save_bytes_per_node, checks.save_window_s)
    for host, problems in sorted(failures.items()):
        for problem in problems:
            logger.info(f"preflight FAILED on {host}: {problem}")
    if not failures:
        logger.info(f"preflight passed on {launcher.nodes} nodes in {time.time() - started:.1f}s")
    return sorted(failures)


def _crashed_fabric(host: str, exc: Exception) -> Callable[[], dict]:
    return lambda: {"host": host, "problems": [f"fabric check crashed: {exc!r}"], "ranks": []}


def _in_background(call: Callable[..., dict], *args: Any) -> Callable[[], dict]:
    """Start call(*args) in a thread; the returned function waits for its dict (an exception as {"write_error"})."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome.update(call(*args))
        except Exception as exc:  # the node still reports; the batch shell names it
            outcome["write_error"] = f"write probe crashed: {exc!r}"

    thread = threading.Thread(target=target, name="storage-probe", daemon=True)
    thread.start()

    def result() -> dict:
        thread.join()
        return outcome

    return result


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    settings = PreflightSettings(**json.loads(argv[0])) if argv else PreflightSettings()
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    fabric_result: Callable[[], dict] | None = None
    if settings.fabric.get("enabled"):  # every node takes part, whatever it finds: the others pair with it
        # Its ranks start first: their torch import is the step's longest start-up, the node's checks run meanwhile.
        try:
            fabric_result = fabric.start_node(fabric.FabricSettings(**settings.fabric))
        except Exception as exc:
            fabric_result = _crashed_fabric(host, exc)
    try:
        problems = check_node(settings)
    except Exception as exc:  # report, do not crash: the batch shell names the node
        problems = [f"preflight crashed: {exc!r}"]
    record: dict[str, Any] = {"host": host, "problems": problems}
    # The write probe runs beside the fabric check, not after it: both are bounded, so the step takes the longer of
    # the two, and every node starts writing at the same moment, as in a checkpoint save. The probe mostly waits on
    # fsync while the fabric ranks start up; a pair's exchange that overlaps it sees the same load on every node,
    # and the fabric verdict compares nodes with each other.
    probe = (
        _in_background(storage_probe.probe_record, settings.ckpt_dir, settings.storage_probe_s)
        if settings.ckpt_dir and settings.storage_probe_s > 0 and not problems
        else None
    )
    if fabric_result is not None:
        try:
            record["fabric"] = fabric_result()
        except Exception as exc:
            record["fabric"] = _crashed_fabric(host, exc)()
    if probe is not None:
        record.update(probe())
    print(RESULT_PREFIX + json.dumps(record), flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
