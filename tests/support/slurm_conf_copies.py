"""A copy of the sandbox's configuration folder with some slurm.conf lines replaced: what a Slurm outage looks like
to a client (a port nothing listens on), without touching the daemons other lanes use."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

SECRETS = ("slurmdbd.conf", "db.password")  # the daemons' own: no client reads them


def conf_copy(source: Path, target: Path, **settings: str) -> Path:
    """The configuration folder `source` copied to `target`, with `settings` replacing those lines of slurm.conf
    (MessageTimeout lowered to 3 s, so each refused call gives up in seconds); the copy's slurm.conf."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*SECRETS))
    conf = target / "slurm.conf"
    text = conf.read_text()
    for key, value in {"MessageTimeout": "3", **settings}.items():
        text, found = re.subn(rf"^{key}=.*$", f"{key}={value}", text, flags=re.M)
        assert found == 1, f"{key} not in {conf}"
    conf.write_text(text)
    return conf
