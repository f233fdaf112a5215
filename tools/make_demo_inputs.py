#!/usr/bin/env python3
"""Small inputs in the real layouts for the sandbox demonstration (tools/run_main.sh).

    tools/make_demo_inputs.py DIR

Writes DIR/sources/ (a DAPO-Math-17K-shaped parquet with duplicated prompts, AIME 2024 in the DAPO format with its
32 copies, AIME 2025 as problem/answer JSON lines with zero-padded answers) and DIR/model/ (an empty stand-in model
folder: the rehearsal trainer reads no weights). Nothing here is real data; it exercises the real code paths.
"""

import sys
from pathlib import Path

from bench_prepare_data import make_aime, make_dapo  # same folder: the benchmark's generators in the real schemas


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0]).resolve()
    sources = root / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    make_dapo(sources / "dapo-math-17k.parquet", rows=5_000, prompts=500)
    make_aime(sources)
    model = root / "model"
    model.mkdir(exist_ok=True)
    (model / "README").write_text("Stand-in model folder for the rehearsal trainer, which loads no weights.\n")
    print(sources)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
