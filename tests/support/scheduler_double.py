"""TEST DOUBLE of the scheduler lookups that `beam-slurm logs` makes (`beam_slurm.slurm.scheduler`): one job's squeue
state (`job_state`) and its scontrol record (`job_info`, which `output_facts` asks first), played from a script, so a
test lives through a job's life (pending, running, gone) without Slurm. Slurm's answer once the job is gone: squeue
lists nothing, scontrol fails, the accounting (`accounted_output`) knows nothing here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from beam_slurm.slurm import scheduler


@dataclass
class ScriptedJob:
    job_id: str
    stdout: Path
    """Where the job writes its output (scontrol's StdOut)."""
    states: list[str | Exception]
    """squeue's answer to each state lookup in turn; the last one again once they are used up; '' is gone; an
    exception is raised (a controller that does not answer)."""
    at_lookup: dict[int, Callable[[], None]] = field(default_factory=dict)
    """What happens at the Nth state lookup (1-based), before it answers: the job writes output, Ctrl-C, ..."""
    lookups: int = 0

    def install(self, monkeypatch) -> ScriptedJob:
        monkeypatch.setattr(scheduler, "job_state", self.job_state)
        monkeypatch.setattr(scheduler, "job_info", self.job_info)
        monkeypatch.setattr(scheduler, "accounted_output", lambda job_id: {})
        return self

    def _current(self) -> str | Exception:
        return self.states[min(self.lookups, len(self.states)) - 1] if self.lookups else self.states[0]

    def job_state(self, job_id: str | int) -> str:
        assert str(job_id) == self.job_id, job_id
        self.lookups += 1
        if self.lookups in self.at_lookup:
            self.at_lookup[self.lookups]()
        current = self._current()
        if isinstance(current, Exception):
            raise current
        return current

    def job_info(self, job_id: str | int) -> dict[str, str]:
        assert str(job_id) == self.job_id, job_id
        if isinstance(self._current(), Exception):
            raise self._current()  # type: ignore[misc]
        if not self._current():
            raise scheduler.SlurmCommandError(f"scontrol: error: Invalid job id specified ({job_id})")
        return {"JobId": self.job_id, "JobName": "beam", "JobState": self._current(), "StdOut": str(self.stdout),
                "WorkDir": str(self.stdout.parent)}
