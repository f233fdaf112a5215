"""Every verb of a run's life (status, requeue, stop, cancel, logs, evaluate) under a Slurm outage, as a user runs
it (`.venv/bin/beam-slurm`, a real subprocess), against a real two-point sweep queued on the sandbox (held back by
--begin, so nothing starts): one message naming the daemon that did not answer and what to do, no traceback, the
exit status decided per verb (README, "When Slurm does not answer"), and the run's files as they were.

The outages are real client failures without touching the sandbox's daemons (other lanes use them): the verb gets a
copy of the sandbox's configuration folder (slurm.conf with its gres.conf, cli_filter.lua, ...) in which
SlurmctldPort is a port nothing listens on (squeue, scontrol, scancel, sbatch: "Unable to contact slurm
controller"), one in which AccountingStoragePort is (sacct: "Connection refused", while squeue and scontrol answer),
and one in which the controller's port accepts and never answers ("Socket timed out"). MessageTimeout is lowered in
the copies so that each refused call gives up in seconds."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from aime_files import write_aime_parquet
from local_ports import free_port
from slurm_conf_copies import conf_copy

pytestmark = [pytest.mark.sandbox, pytest.mark.slurm_semantics]

REPO_ROOT = Path(__file__).resolve().parents[2]
BEAM = [str(REPO_ROOT / ".venv" / "bin" / "beam-slurm")]
CONTROLLER = "Slurm's controller (slurmctld) did not answer"
ACCOUNTING = "Slurm's accounting daemon (slurmdbd) did not answer"
BOUND_S = 240  # seconds a verb may take here before the test calls it hung


@dataclass
class Shared:
    env: dict[str, str]
    sweep_dir: Path
    runs: list[Path]
    jobs: list[str]
    confs: dict[str, Path]  # outage -> its slurm.conf
    checkpoint: Path
    data: Path
    out: Path


def _mute_server(host: str, stop: threading.Event) -> int:
    """A port that accepts connections and never answers (until `stop`): a controller that hangs."""
    server = socket.socket()
    server.bind((host, 0))
    server.listen(16)
    server.settimeout(0.5)
    held: list[socket.socket] = []

    def serve() -> None:
        deadline = time.monotonic() + 300  # bounded: it ends by itself
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
        for connection in held:
            connection.close()
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


@pytest.fixture(scope="module")
def shared(slurm_sandbox, tmp_path_factory):
    base = slurm_sandbox.new_dir("outages")
    for name in ("model", "skyrl/examples/train/algorithms/dapo", "home"):
        (base / name).mkdir(parents=True)
    (base / "skyrl/examples/train/algorithms/dapo/main_dapo.py").touch()
    env = slurm_sandbox.env({"HOME": str(base / "home"), "MODEL_PATH": str(base / "model"),
                             "DATA_DIR": str(base / "data"), "SKYRL_DIR": str(base / "skyrl"),
                             "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"})
    for name in ("BEAM_EXPORTS_ROOT", "CKPT_PATH", "EXPORT_PATH", "RUN_NAME", "BEAM_LOG_DIR", "MAX_TRAINING_STEPS"):
        env.pop(name, None)
    submitted = subprocess.run([*BEAM, "submit", "-m", "--stages", "train", "--json", "recipe=lora_16gpu",
                                "trainer.backend=rehearsal", "container.runtime=none",
                                "cluster.check_paths_on_submit=false", "max_training_steps=4,6",
                                "cluster.extra_sbatch_args=['--begin=now+1hour']"],
                               env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert submitted.returncode == 0, submitted.stderr
    answer = json.loads(submitted.stdout)
    jobs = [run["stages"][0]["job_id"] for run in answer["runs"]]
    slurm_sandbox.submitted.extend(jobs)
    host = re.search(r"^SlurmctldHost=\S+?\(([\d.]+)\)", slurm_sandbox.slurm_conf.read_text(), re.M)
    address = host.group(1) if host else "127.0.0.1"
    folder = slurm_sandbox.slurm_conf.parent
    confs = tmp_path_factory.mktemp("outage-confs")
    stop = threading.Event()
    made = {
        "controller": conf_copy(folder, confs / "controller", SlurmctldPort=str(free_port(address))),
        "accounting": conf_copy(folder, confs / "accounting", AccountingStoragePort=str(free_port(address))),
        "hung controller": conf_copy(folder, confs / "hung", SlurmctldPort=str(_mute_server(address, stop))),
    }
    # An export for evaluate's input checks (a config.json and an empty weights file): never loaded, since no
    # submission reaches Slurm while its controller does not answer.
    checkpoint = base / "exports" / "global_step_2"
    (checkpoint / "policy").mkdir(parents=True)
    (checkpoint / "policy" / "config.json").write_text('{"model_type": "llama"}')
    (checkpoint / "policy" / "model.safetensors").touch()
    data = write_aime_parquet(base / "aime-tiny-cleaned.parquet")
    yield Shared(env, Path(answer["sweep_dir"]), [Path(r["export_path"]) for r in answer["runs"]], jobs, made,
                 checkpoint, data, base / "exports" / "evals" / "global_step_2")
    stop.set()


def _tree_hash(*roots: Path) -> dict[str, str]:
    """Every file under the roots -> its content's hash (the run's records, attempt folders, anything)."""
    return {
        str(path): hashlib.sha256(path.read_bytes()).hexdigest()
        for root in roots
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _beam(shared: Shared, outage: str, args: list[str], interrupt_when: str | None = None):
    """Run `beam-slurm ARGS` with the outage's slurm.conf; with `interrupt_when`, Ctrl-C it once that text is in its
    stderr (a watch, a follow: it got that far). Returns (exit status, stdout, stderr, seconds). The bounds are
    generous: under the whole suite's load the verb's start alone takes tens of seconds."""
    env = {**shared.env, "SLURM_CONF": str(shared.confs[outage])}
    words = [str(a).replace("RUN", str(shared.runs[0])).replace("SWEEP", str(shared.sweep_dir))
             .replace("JOB", shared.jobs[0]) for a in args]
    words = [w.replace("CHECKPOINT", str(shared.checkpoint)).replace("DATA", str(shared.data))
             .replace("OUT", str(shared.out)) for w in words]
    started = time.monotonic()
    with subprocess.Popen([*BEAM, *words], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL) as process:
        if interrupt_when is None:
            try:
                out, err = process.communicate(timeout=BOUND_S)
            except subprocess.TimeoutExpired:
                process.kill()
                raise AssertionError(f"beam-slurm {' '.join(words)} did not end within {BOUND_S} s") from None
            return process.returncode, out, err, time.monotonic() - started
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")), daemon=True)
        reader.start()
        while interrupt_when not in "".join(lines) and process.poll() is None:
            assert time.monotonic() - started < BOUND_S, f"no {interrupt_when!r} within {BOUND_S} s: {lines}"
            time.sleep(0.2)
        time.sleep(1.5)  # a round of the watch after the line
        process.send_signal(signal.SIGINT)
        out = process.stdout.read()
        process.wait(timeout=60)
        reader.join(timeout=10)
    return process.returncode, out, "".join(lines), time.monotonic() - started


# (arguments, exit status, words in stderr, words in stdout). Every verb fails at once with the controller's
# message, the records untouched; status still shows what the run records hold (exit 1: no job state is known).
CONTROLLER_CASES = [
    (["status", "RUN"], 1, ["no job states (UNKNOWN)", "the rows are from the run records"], ["UNKNOWN", "JOB"]),
    (["status", "SWEEP"], 1, ["no job states"], ["UNKNOWN"]),
    (["status", "RUN", "--json"], 1, ["no job states"], ['"unanswered": [\n    "slurmctld"\n  ]', '"UNKNOWN"']),
    (["status", "RUN", "--watch", "--interval", "1"], 1, ["no job states"], ["UNKNOWN"]),
    (["requeue", "RUN"], 1, ["could not ask whether job JOB runs, nothing was sent to it"], []),
    (["stop", "RUN"], 1, ["could not ask whether job JOB runs, nothing was sent to it"], []),
    (["cancel", "SWEEP", "--yes"], 1, ["are queued or running, none cancelled"], []),
    (["logs", "JOB", "--follow"], 1, ["cannot follow job JOB: could not ask whether it runs"], []),
    (["evaluate", "--checkpoint", "CHECKPOINT", "--data", "DATA", "--out", "OUT"], 1, ["nothing submitted"], []),
]


@pytest.mark.parametrize(("args", "status", "errs", "outs"), CONTROLLER_CASES,
                         ids=[" ".join(case[0][:4]) for case in CONTROLLER_CASES])
def test_each_verb_without_the_controller(shared, args, status, errs, outs):
    before = _tree_hash(shared.sweep_dir, *shared.runs, shared.checkpoint.parent)
    code, out, err, took = _beam(shared, "controller", args)
    job = shared.jobs[0]
    assert code == status, (code, out, err)
    assert CONTROLLER in err and "`scontrol ping`" in err and "administrators" in err, err
    assert "Unable to contact slurm controller" in err and "Traceback" not in err + out, err
    assert all(e.replace("JOB", job) in err for e in errs), err
    assert all(o.replace("JOB", job) in out for o in outs), out
    assert _tree_hash(shared.sweep_dir, *shared.runs, shared.checkpoint.parent) == before
    assert not (shared.checkpoint.parent / ".submitit").exists()  # submitit's files of a job Slurm never took
    assert took < 30, took


def test_a_controller_that_hangs(shared):
    """A port that takes the connection and never answers: Slurm's own "Socket timed out", named as the controller."""
    before = _tree_hash(shared.sweep_dir, *shared.runs)
    code, out, err, _ = _beam(shared, "hung controller", ["status", "RUN"])
    assert code == 1 and CONTROLLER in err and "Socket timed out" in err and "Traceback" not in err, err
    code, out, err, _ = _beam(shared, "hung controller", ["requeue", "RUN"])
    assert code == 1 and CONTROLLER in err and "nothing was sent" in err and "Traceback" not in err, err
    assert _tree_hash(shared.sweep_dir, *shared.runs) == before


# Without the accounting: squeue and scontrol answer, so every verb does its work; status says what it lacks.
ACCOUNTING_CASES = [
    (["status", "RUN"], 0, ["states from squeue only", ACCOUNTING], ["PENDING", "BeginTime"]),
    (["status", "SWEEP", "--json"], 0, ["states from squeue only"], ['"unanswered": [\n    "slurmdbd"\n  ]']),
    (["requeue", "RUN"], 0, [], []),
]


@pytest.mark.parametrize(("args", "status", "errs", "outs"), ACCOUNTING_CASES,
                         ids=[" ".join(case[0]) for case in ACCOUNTING_CASES])
def test_each_verb_without_the_accounting(shared, args, status, errs, outs):
    before = _tree_hash(shared.sweep_dir, *shared.runs)
    code, out, err, _ = _beam(shared, "accounting", args)
    assert code == status, (code, out, err)
    assert "Traceback" not in err + out, err
    assert all(e in err for e in errs), err
    assert all(o in out for o in outs), out
    assert _tree_hash(shared.sweep_dir, *shared.runs) == before


def test_watch_and_follow_without_the_accounting(shared):
    """They go on (squeue answers) until Ctrl-C, which ends them with 0."""
    code, out, err, _ = _beam(shared, "accounting", ["status", "RUN", "--watch", "--interval", "1"],
                              "states from squeue only")
    assert code == 0 and "states from squeue only" in err and "PENDING" in out and "Traceback" not in err, err
    code, out, err, _ = _beam(shared, "accounting", ["logs", "JOB", "--follow"], "is pending; waiting")
    assert code == 0 and f"job {shared.jobs[0]} is pending; waiting" in err and "Traceback" not in err, err


def test_evaluate_submits_without_the_accounting(shared, slurm_sandbox):
    """sbatch asks the controller only: the evaluation array is submitted (and cancelled at once: its export is not
    a model)."""
    code, out, err, _ = _beam(shared, "accounting", ["evaluate", "--checkpoint", "CHECKPOINT", "--data", "DATA",
                                                     "--out", "OUT"])
    found = re.search(r"-> job array (\d+)", out)
    if found:
        slurm_sandbox.cancel(found.group(1))
    assert code == 0 and found and "Traceback" not in err, (out, err)


def test_stop_and_cancel_work_without_the_accounting(shared, slurm_sandbox):
    """Last (they end the jobs): the controller alone is needed to stop one run's pending job and cancel the other."""
    code, out, err, _ = _beam(shared, "accounting", ["stop", "RUN"])
    assert code == 0 and f"job {shared.jobs[0]} was pending: cancelled" in out, (out, err)
    code, out, err, _ = _beam(shared, "accounting", ["cancel", "SWEEP", "--yes"])
    assert code == 0 and f"cancelled 1 job(s) of 1 run(s): {shared.jobs[1]}" in out, (out, err)
    assert all(slurm_sandbox.wait(job, timeout=60) == "CANCELLED" for job in shared.jobs)
