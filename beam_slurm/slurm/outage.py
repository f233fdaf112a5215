"""Which Slurm daemon did not answer a command: the controller (slurmctld: squeue, scontrol, scancel, sbatch, srun)
or the accounting daemon (slurmdbd: sacct, sacctmgr), told from the client's own words. A daemon that does not answer
is an outage (retry later), not a refusal (change the request) and not a user's error."""

from __future__ import annotations

CONTROLLER = "slurmctld"
ACCOUNTING = "slurmdbd"
ACCOUNTING_COMMANDS = ("sacct", "sacctmgr", "sreport")
"""Clients that ask slurmdbd directly (every other one asks the controller)."""

NO_ANSWER_TEXTS = (
    "Unable to contact slurm controller",  # squeue/scontrol/scancel/sbatch: nothing listens on SlurmctldPort
    "Socket timed out",  # it listens but does not answer within MessageTimeout
    "Zero Bytes were transmitted",  # the connection closed before an answer
    "Connection refused",  # sacct/sacctmgr: nothing listens on AccountingStoragePort
    "Connection timed out",
    "Unable to establish",
    "failed to open persistent connection",  # sacct's words for a slurmdbd it cannot reach
    "Problem talking to the database",
    "Sending PersistInit msg",
    "Connection reset",  # the request or the answer lost on the way (sbatch's own words for a lost answer)
    "Communication connection failure",
    "Transport endpoint is not connected",
    "Broken pipe",
    "No route to host",
    "Network is unreachable",
)
"""What Slurm 22.05+ clients print when the daemon they ask did not answer (recorded in tests/slurm/test_outage.py)."""

TIMED_OUT_TEXTS = ("Socket timed out", "did not answer within")
"""Of those, the ones where the request may have reached the daemon before the answer was lost."""

NAMES = {CONTROLLER: "Slurm's controller (slurmctld)", ACCOUNTING: "Slurm's accounting daemon (slurmdbd)"}

ADVICE = {
    CONTROLLER: "retry later; `scontrol ping` says whether the controller is up; if it stays down, ask the cluster's "
    "administrators",
    ACCOUNTING: "retry later; `sacct -X` answers again once slurmdbd is back; if it stays down, ask the cluster's "
    "administrators",
}


def daemon_of(command: str) -> str:
    """The daemon a Slurm client command asks: `sacct` -> slurmdbd, `squeue` -> slurmctld (a path or a bare name)."""
    name = command.rsplit("/", 1)[-1]
    return ACCOUNTING if name in ACCOUNTING_COMMANDS else CONTROLLER


def unanswered(command: str, text: str) -> str | None:
    """The daemon that did not answer `command`, when its output `text` says one did not; None for any other
    failure (a refusal, an unknown job, a bad option)."""
    return daemon_of(command) if any(marker in text for marker in NO_ANSWER_TEXTS) else None


def timed_out(text: str) -> bool:
    """The daemon took the request and gave no answer in time: it may have done what was asked."""
    return any(marker in text for marker in TIMED_OUT_TEXTS)


def outage_text(daemon: str, detail: str) -> str:
    """One message for an outage: who did not answer, Slurm's own words, what to do."""
    return f"{NAMES[daemon]} did not answer ({detail}); {ADVICE[daemon]}"
