"""The evaluation task's hang watchdog: a chunk that never comes ends the task's wait with dumps, the chunks saved
before it kept. The engine here is a test double (`StuckEngine`): vLLM cannot be made to stop producing tokens on
demand; everything else (the store, generate_missing's loop, the watchdog thread, faulthandler, procfs) is real.
What Slurm then does with the task (`scontrol requeue`) is the requeue verb's and the array's sandbox tests'."""
from __future__ import annotations

import subprocess
import threading
import time

from beam_slurm.jobs.evaluation import resumable
from beam_slurm.jobs.evaluation.hang_guard import GenerationWatchdog, chunk_limit_s
from beam_slurm.jobs.evaluation.problems import Problem


class StuckEngine:
    """Test double of an engine: answers the first chunk, then blocks on the second as a stuck engine would."""

    def __init__(self):
        self.release = threading.Event()
        self.calls = 0

    def generate(self, chunk):
        self.calls += 1
        if self.calls == 2:
            self.release.wait(60)
        return [{"problem_id": p.problem_id, "sample": first + i, "text": "Answer: 42"}
                for p, n, first in chunk for i in range(n)]


def test_the_limit_is_the_setting_or_five_median_chunks_with_a_floor_and_a_start_allowance():
    assert chunk_limit_s(30, [], 100) == 130 and chunk_limit_s(30, [1.0], 100) == 30
    assert chunk_limit_s(None, [], 100) == 700 and chunk_limit_s(None, [200.0, 300.0, 400.0], 100) == 1500


def test_a_chunk_that_never_comes_is_a_hang_with_dumps_and_the_saved_chunk_is_kept(tmp_path, log_lines):
    problems = [Problem("aime2025", str(i), [{"role": "user", "content": f"p{i}"}], "42") for i in range(4)]
    store = resumable.SampleStore(tmp_path / "store")
    engine = StuckEngine()
    hung = threading.Event()
    child = subprocess.Popen(["sleep", "60"])  # a child process of the task (vLLM's engine, here `sleep`)
    lines = log_lines
    try:
        began = time.monotonic()
        with GenerationWatchdog(1.0, 0.0, store.folder, on_hang=hung.set) as watchdog:
            worker = threading.Thread(target=resumable.generate_missing, args=(
                store, problems, 2, lambda: engine, 2, resumable.Progress(), watchdog.chunk_saved))
            worker.start()
            assert hung.wait(10), lines
            detected = time.monotonic() - began
            saved_at_the_hang = store.counts()
            engine.release.set()
            worker.join(10)
    finally:
        child.kill()
    assert detected < 1.0 + 2 * 2.0 + 2, detected  # the limit plus at most two polls
    assert saved_at_the_hang == {"0": 2, "1": 2}  # the chunk saved before the hang is kept
    dumps = list((store.folder / "hang").glob("*/*.txt"))
    task = [d for d in dumps if d.name.endswith("-task.txt")]
    assert task and "generate" in task[0].read_text(), [d.name for d in dumps]
    assert any(f"{child.pid}-sleep" in d.name for d in dumps), [d.name for d in dumps]
    assert any("hang: no chunk saved" in line for line in lines), lines


def test_zero_turns_it_off(tmp_path):
    called = threading.Event()
    with GenerationWatchdog(0, 0.0, tmp_path, on_hang=called.set):
        time.sleep(2.5)
    assert not called.is_set()
