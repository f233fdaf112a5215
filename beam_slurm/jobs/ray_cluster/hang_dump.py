"""On a hang: what each node can say about this job's processes, then ending them for certain. One task per node
(`srun --overlap`, beside the Ray step), started by the batch shell's hang watchdog (`attempt.Attempt.handle_hang`).

    python -m beam_slurm.jobs.ray_cluster.hang_dump --dir <attempt>/hang --job <id> --step <ray step ids,...> [--end]

The job's processes on a node are those whose environment names this job, the Ray step and this node. Without
`--end`, into `<dir>/<node>/`: a `py-spy dump --nonblocking` of every Python process (the default mode stops the
process and can hang on a stuck one), `nvidia-smi.txt`, `processes.json` and, on the head's node, `ray_actors.txt`
(`ray list actors --detail`); with `--end`, SIGCONT, SIGTERM, then SIGKILL after `--grace` seconds, and
`ended.json` (exit 3 when something survived). Docs: guides/operations.md, "Hangs".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from beam_slurm.config.job_spec import JobSpec
from beam_slurm.core.atomic_files import read_json, write_json, write_text
from beam_slurm.core.ray_records import HEAD_FILE
from beam_slurm.jobs.ray_cluster import auth
from beam_slurm.jobs.ray_cluster.local_ray import proc_file, stat_fields
from beam_slurm.policy.hang_watch import innermost_frame

PY_SPY_TIMEOUT_S = 20.0  # py-spy's longest read of one process (--nonblocking reads memory without stopping it)
EXIT_SURVIVORS = 3
RAY_LIST_TIMEOUT_S = 30.0  # the state API reads the GCS, which a hung trainer leaves answering: seconds at most


def _environ(pid: int) -> dict[str, str]:
    pairs = (item.partition(b"=") for item in proc_file(pid, "environ").split(b"\0"))
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, sep, value in pairs if sep}


def process_state(pid: int) -> str:
    """The /proc state letter (R, S, D, T, Z, ...), '' when the process is gone."""
    return (stat_fields(pid) or [""])[0]


def parent_pid(pid: int) -> int:
    """The parent's pid, 0 when the process is gone."""
    fields = stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else 0


def role_of(pid: int) -> str:
    """What the process is: its title ('ray::GpuSlot.step'), else its program and module ('python -m pkg.mod')."""
    words = [w.decode(errors="replace") for w in proc_file(pid, "cmdline").split(b"\0") if w]
    if not words:
        return proc_file(pid, "comm").decode(errors="replace").strip()
    program = os.path.basename(words[0].split()[0])
    if program.startswith("ray::") or not program.startswith("python"):
        return " ".join(words[0].split()[:1]) if program.startswith("ray::") else program
    rest = words[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[1:]  # interpreter options (-u, -X ...)
    if len(rest) > 1 and rest[0] == "-m":
        return f"python -m {rest[1]}"
    if rest and rest[0] == "-c":
        return "python -c"
    return f"python {os.path.basename(rest[0])}" if rest else program


def is_python(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    return False


def step_processes(job_id: str, step_id: str) -> list[int]:
    """Pids on this node whose environment names one of this job's steps `step_id` (comma-separated: the Ray steps,
    one a node), never this process or its parents."""
    steps = set(step_id.split(","))
    mine, pid = set(), os.getpid()
    while pid > 1:  # this task and the slurmstepd above it
        mine.add(pid)
        pid = parent_pid(pid)
    # Where nodes share one process table (containers of one host, the sandbox's namespaces), a process is this
    # node's when the task that started it ran here (SLURMD_NODENAME).
    node = os.environ.get("SLURMD_NODENAME")
    pids = (int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) not in mine)
    return sorted(
        pid
        for pid in pids
        if (env := _environ(pid)).get("SLURM_JOB_ID") == job_id
        and env.get("SLURM_STEP_ID") in steps
        and (node is None or env.get("SLURMD_NODENAME", node) == node)
    )


def py_spy() -> str | None:
    """py-spy beside this interpreter (installed with beam-slurm), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def dump_process(pid: int, spy: str | None) -> tuple[str, str]:
    """(py-spy's dump, '' ) or ('', why there is none)."""
    if spy is None:
        return "", "py-spy is not installed where beam_slurm runs on this node"
    try:
        done = subprocess.run(
            [spy, "dump", "--pid", str(pid), "--nonblocking"],
            capture_output=True,
            text=True,
            timeout=PY_SPY_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "", f"py-spy did not answer within {PY_SPY_TIMEOUT_S:.0f} s"
    if done.returncode != 0:
        words = " ".join((done.stderr.strip() or done.stdout.strip()).split())
        if "ermission" in words or "ptrace" in words.lower():
            words += " (py-spy may not read this process: ptrace rights, e.g. kernel.yama.ptrace_scope or a container)"
        return "", words or f"py-spy exited with {done.returncode}"
    return done.stdout, ""


def dump_node(folder: Path, job_id: str, step_id: str) -> list[dict]:
    node = socket.gethostname()
    out = folder / node
    out.mkdir(parents=True, exist_ok=True)
    spy, rows = py_spy(), []
    for pid in step_processes(job_id, step_id):
        role, state = role_of(pid), process_state(pid)
        row = {"node": node, "pid": pid, "role": role, "state": state, "python": is_python(pid), "frame": ""}
        if row["python"]:
            began = time.monotonic()
            text, error = dump_process(pid, spy)
            name = f"{pid}-{role.replace('/', '_').replace(' ', '_')[:60]}.txt"
            write_text(
                out / name,
                f"# pid {pid} on {node}: {role}, state {state}\n" + (text if text else f"# no stack: {error}\n"),
            )
            row.update(dump=name, error=error, frame=innermost_frame(text), dump_s=round(time.monotonic() - began, 3))
        rows.append(row)
    if shutil.which("nvidia-smi"):
        parts = []
        for argv in (
            ["nvidia-smi"],
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
        ):
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
                parts.append(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
            except subprocess.TimeoutExpired:
                parts.append(f"$ {' '.join(argv)}\n(no answer within 30 s: the driver itself may be stuck)\n")
        write_text(out / "nvidia-smi.txt", "\n".join(parts))
    write_json(out / "processes.json", rows)  # before the actor list, which may wait on Ray for seconds
    head = read_json(folder.parent / HEAD_FILE) or {}
    if head.get("host") == node:
        write_text(out / "ray_actors.txt", list_actors(head, JobSpec.read(folder.parent)))
    return rows


def list_actors(head: dict, spec: JobSpec) -> str:
    """`ray list actors --detail` of the attempt's cluster, or why there is none."""
    if not spec.ray.include_dashboard:
        return "# no actor list: Ray's state API is served by the dashboard, off here (ray.include_dashboard=false)\n"
    argv = [sys.executable, "-m", "ray.scripts.scripts", "list", "actors", "--detail", "--limit", "10000"]
    token = Path(head["token_path"]) if head.get("token_path") else None
    env = {**os.environ, "RAY_ADDRESS": head["address"], **(auth.auth_env(spec.ray, token) if token else {})}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RAY_LIST_TIMEOUT_S, env=env, check=False)
        return f"$ ray list actors --detail --limit 10000\n{done.stdout}{done.stderr}"
    except subprocess.TimeoutExpired:
        return f"# ray list actors: no answer within {RAY_LIST_TIMEOUT_S:.0f} s\n"


def end_processes(pids: list[int], grace_s: float) -> tuple[list[int], list[dict]]:
    """SIGCONT, SIGTERM, then SIGKILL after grace_s; (the pids that needed SIGKILL, what survived it)."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(process_state(p) not in ("", "Z") for p in pids):
        time.sleep(0.2)
    killed = [p for p in pids if process_state(p) not in ("", "Z")]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(2.0 if killed else 0)
    return killed, [
        {"pid": p, "role": role_of(p), "state": process_state(p)} for p in killed if process_state(p) not in ("", "Z")
    ]


def end_node(folder: Path, job_id: str, step_id: str, grace_s: float) -> list[dict]:
    """End what is left of the step on this node; what survived SIGKILL."""
    node = socket.gethostname()
    pids = step_processes(job_id, step_id)
    killed, survivors = end_processes(pids, grace_s)
    (folder / node).mkdir(parents=True, exist_ok=True)
    write_json(
        folder / node / "ended.json", {"node": node, "signalled": pids, "killed": killed, "survivors": survivors}
    )
    return survivors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m beam_slurm.jobs.ray_cluster.hang_dump", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dir", required=True, type=Path, help="the attempt's hang/ folder")
    parser.add_argument("--job", required=True, help="SLURM_JOB_ID of the job")
    parser.add_argument("--step", required=True, help="SLURM_STEP_IDs of the Ray steps, comma-separated")
    parser.add_argument("--end", action="store_true", help="end the step's processes instead of dumping them")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    args = parser.parse_args(argv)
    if args.end:
        return EXIT_SURVIVORS if end_node(args.dir, args.job, args.step, args.grace) else 0
    rows = dump_node(args.dir, args.job, args.step)
    print(
        json.dumps(
            {
                "node": socket.gethostname(),
                "processes": len(rows),
                "dumped": sum(1 for r in rows if r.get("dump") and not r.get("error")),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
