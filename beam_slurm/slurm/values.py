"""Slurm's value grammars, read as Slurm reads them: durations, memory sizes, partition lists. Input and output are two
grammars, kept apart as Slurm keeps them: what a user gives `sbatch --time` (a bare number is minutes: `30:00` is 30
minutes; seconds round up to the minute; 0, -1, UNLIMITED and INFINITE mean no limit), and what scontrol and sacct print
([D-]HH:MM:SS, a bare number of seconds for GraceTime, and words such as UNLIMITED or Partition_Limit for none)."""

from __future__ import annotations

import math
import re

NO_LIMIT_WORDS = ("unlimited", "infinite")
REPORTED_NONE = ("unlimited", "partition_limit", "none", "invalid", "n/a", "")
_NUMBER = re.compile(r"^\d+$")
_MEMORY = re.compile(r"^(\d+)([KMGT]?)$", re.IGNORECASE)
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]+$")
_MEGABYTES = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


class SlurmValueError(ValueError):
    """A value Slurm would refuse; the message says which forms it takes."""


TIME_FORMS = (
    "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 90, 30:00, 24:00:00, 2-00:00:00), or UNLIMITED"
)


def time_limit_seconds(text: str | int) -> int | None:
    """`--time` in seconds, rounded up to minutes as Slurm does; None: no limit; SlurmValueError if Slurm refuses."""
    value = str(text).strip()
    if value.lower() in NO_LIMIT_WORDS or value in ("-1", "0"):
        return None
    days_text, dash, clock = value.partition("-")
    if not dash:
        days_text, clock = "", value
    parts = clock.split(":")
    if (dash and not _NUMBER.match(days_text)) or not all(_NUMBER.match(p) for p in parts) or len(parts) > 3:
        raise SlurmValueError(f"{value!r} is not a Slurm time; use {TIME_FORMS}")
    numbers = [int(p) for p in parts]
    if dash:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (numbers + [0, 0])[:3]
    else:  # minutes, minutes:seconds or hours:minutes:seconds
        hours, minutes, seconds = numbers if len(numbers) == 3 else ([0] + numbers + [0])[:3]
    total = (((int(days_text) if dash else 0) * 24 + hours) * 60 + minutes) * 60 + seconds
    return math.ceil(total / 60) * 60 if total else None


def reported_seconds(text: str | None) -> int | None:
    """A duration as scontrol or sacct prints it, in seconds: '1-00:00:00', '00:01:12', '05:00' (MM:SS), '20'
    (seconds, as GraceTime prints); None for UNLIMITED, Partition_Limit, NONE, INVALID, '' and anything else."""
    value = (text or "").strip()
    if value.lower() in REPORTED_NONE:
        return None
    if _NUMBER.match(value):
        return int(value)
    days_text, dash, clock = value.rpartition("-")
    parts = clock.split(":")
    if (dash and not _NUMBER.match(days_text)) or not all(_NUMBER.match(p) for p in parts) or not 2 <= len(parts) <= 3:
        return None
    hours, minutes, seconds = [0] * (3 - len(parts)) + [int(p) for p in parts]
    return (int(days_text) if dash else 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def describe_seconds(seconds: int | None) -> str:
    """'30 min', '1 h 30 min', '2 d', '1 d 6 h' ... for a plan row; 'no limit' for None."""
    if seconds is None:
        return "no limit"
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")) if n]
    return " ".join(parts) or "0 s"


def memory_megabytes(text: str | int) -> int:
    """`--mem` as Slurm reads it, in MB (0: all of each node's memory). Raises SlurmValueError."""
    value = str(text).strip()
    match = _MEMORY.match(value)
    if not match:
        raise SlurmValueError(
            f"{value!r} is not a Slurm memory size; use a number with K, M, G or T (M when none), "
            "e.g. 1800G, or 0 for all of each node's memory"
        )
    return math.ceil(int(match.group(1)) * _MEGABYTES[(match.group(2) or "M").upper()])


def partition_names(text: str) -> list[str]:
    """`--partition` as Slurm reads it: one name or a comma-separated list. Raises SlurmValueError."""
    names = [name.strip() for name in str(text).split(",")]
    if not names or not all(_PARTITION.match(name) for name in names):
        raise SlurmValueError(
            f"{text!r} is not a partition or a comma-separated list of partitions (e.g. gpu or gpu,gpu-long)"
        )
    return names
