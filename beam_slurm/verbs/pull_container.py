"""`beam-slurm pull-container`: import the recipe's image once into shared storage (jobs.container_pull)."""

from __future__ import annotations

import shutil
import sys

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError
from beam_slurm.core.errors import ConfigError
from beam_slurm.core.logs import installed
from beam_slurm.jobs.container_pull import RUNTIME_EXECUTABLE, PullError, pull_image, settings_problems


def build_parser():
    verb = VerbArgs(
        "pull-container",
        "Import the recipe's container image once into shared storage (enroot squashfs for pyxis, SIF for\n"
        "Apptainer). Safe to run from several jobs at once. Example:\n"
        "  beam-slurm pull-container container.runtime=pyxis container.image=REF container.image_cache_dir=DIR",
        keys=[
            "container.runtime",
            "container.image",
            "container.image_cache_dir",
            "container.lock_stale_after_s",
            "container.lock_timeout_s",
        ],
        epilog="Registry credentials: enroot reads $ENROOT_CONFIG_PATH/.credentials (default "
        "~/.config/enroot/.credentials, netrc format); Apptainer uses `apptainer registry login` or "
        "APPTAINER_DOCKER_USERNAME / APPTAINER_DOCKER_PASSWORD. Never put them in container.image.",
    )
    verb.add_argument("--force", action="store_true", help="import again even if a complete import is present")
    verb.add_argument("--verify", action="store_true", help="also re-hash an existing image before skipping it")
    return verb


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        parsed = verb.parse(argv)
        cfg = verb.load(parsed)
    except (ConfigError, VerbUsageError) as err:
        return verb.report(err)
    args, settings = parsed.args, cfg.container
    name = RUNTIME_EXECUTABLE.get(settings.runtime)
    executable = shutil.which(name) if name else None
    if problems := settings_problems(settings, executable):
        for message in problems:
            verb.fail(message)
        return 2
    try:
        with installed("beam_slurm", "pull-container: ", stream="stdout"):
            result = pull_image(settings, force=args.force, verify=args.verify, executable=executable)
    except PullError as err:
        return verb.fail(err, status=1)
    print(result.image_path, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
