"""By hand, on a GPU machine: the hang watchdog's dump and end code pointed at a process blocked in a CUDA call.

    python tools/gpu_hang_check.py [--py-spy PATH] [--out DIR]

A child process fills the GPU with one long kernel (`torch.cuda._sleep`) and blocks in `torch.cuda.synchronize()`,
alive and silent, as a rank waiting on a GPU that never finishes. Then, with the product's own functions
(`beam_slurm.jobs.ray_cluster.hang_dump`): py-spy `dump --nonblocking` (and `--native`, to see the CUDA call), nvidia-smi,
the process's state, and the end sequence (SIGCONT, SIGTERM, SIGKILL) with how long each took. Prints one JSON
summary and writes the dumps under --out. Needs torch with CUDA; no Ray, no Slurm.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from beam_slurm.jobs.ray_cluster import hang_dump  # noqa: E402

CHILD = """
import torch, sys
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
torch.cuda._sleep(int(2e12))  # one kernel that spins for minutes
torch.cuda.synchronize()      # the host blocks here, in the CUDA runtime
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--py-spy", default=hang_dump.py_spy())
    parser.add_argument("--out", type=Path, default=Path("gpu-hang-check"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(3)
    summary: dict = {"pid": child.pid, "state": hang_dump.process_state(child.pid), "role": hang_dump.role_of(child.pid)}
    began = time.monotonic()
    text, error = hang_dump.dump_process(child.pid, args.py_spy)
    summary.update(dump_s=round(time.monotonic() - began, 3), dump_error=error,
                   frame=hang_dump.innermost_frame(text))
    (args.out / "py-spy.txt").write_text(text or error)
    began = time.monotonic()
    native = subprocess.run([args.py_spy, "dump", "--pid", str(child.pid), "--native"], capture_output=True, text=True,
                            timeout=60, check=False)
    summary["native_dump_s"] = round(time.monotonic() - began, 3)
    (args.out / "py-spy-native.txt").write_text(native.stdout + native.stderr)
    summary["native_cuda_frames"] = [line.strip() for line in native.stdout.splitlines()
                                     if "cuda" in line.lower()][:8]
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
                         capture_output=True, text=True, timeout=30, check=False)
    (args.out / "nvidia-smi.txt").write_text(subprocess.run(["nvidia-smi"], capture_output=True, text=True,
                                                            timeout=30).stdout + smi.stdout)
    summary["nvidia_smi_apps"] = smi.stdout.strip().splitlines()
    began = time.monotonic()
    killed, survivors = hang_dump.end_processes([child.pid], grace_s=10.0)
    child.wait(timeout=30)
    summary.update(end_s=round(time.monotonic() - began, 3), needed_sigkill=bool(killed), survivors=survivors,
                   returncode=child.returncode)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
