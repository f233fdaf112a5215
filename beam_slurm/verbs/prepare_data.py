"""`beam-slurm prepare-data [--force] [data.<key>=<value> ...]`: build the three cleaned parquet files and the manifest.

    beam-slurm prepare-data data.dapo_math=FILE data.aime2024=FILE data.aime2025=FILE data.out_dir=DIR

Exit status 0 on success, 2 on bad input (nothing in out_dir is changed then); `--help` lists the keys."""

from __future__ import annotations

import sys

from beam_slurm.config.verb_args import VerbArgs, VerbUsageError, keys_under
from beam_slurm.core.errors import BadDataInput, ConfigError
from beam_slurm.core.logs import installed
from beam_slurm.jobs.data.prepare import prepare


def build_parser():
    verb = VerbArgs(
        "prepare-data",
        "Build dapo-math-17k-cleaned.parquet, aime-2024-cleaned.parquet, aime-2025-cleaned.parquet and\n"
        "prepare-data-manifest.json in data.out_dir (default paths.data_dir, env DATA_DIR). Sources are "
        "local\nfiles or hf://datasets/<owner>/<name>[@<revision>][/<path-in-repo>].",
        keys=[*keys_under("data"), "paths.data_dir"],
    )
    verb.add_argument("--force", action="store_true", help="rebuild outputs even when they are up to date")
    verb.add_argument(
        "--adopt",
        action="store_true",
        help="record cleaned files already in data.out_dir without a "
        "manifest entry (schema and rows checked) instead of refusing them",
    )
    return verb


def main(argv: list[str]) -> int:
    verb = build_parser()
    try:
        parsed = verb.parse(argv)
        cfg = verb.load(parsed)
        with installed("beam_slurm", "prepare-data: "):  # stderr: stdout stays clean for callers
            prepare(cfg.data, force=parsed.args.force, data_dir=cfg.paths.data_dir, adopt=parsed.args.adopt)
    except (ConfigError, VerbUsageError, BadDataInput) as error:
        return verb.report(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
