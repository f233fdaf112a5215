#!/usr/bin/env bash
# Build the documentation site into site/: generate the reference pages from the code (docs/references.py writes
# docs/pages/reference/, never committed), then `mkdocs build --strict`, where a broken link, a missing anchor or a
# page outside the nav fails the build. Installs the `docs` extra of pyproject.toml into .venv when its pinned
# versions are not there; once they are, it needs no network.
# Usage: bash tools/build_docs.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "build_docs: $ROOT/.venv missing; run tools/install.sh first" >&2; exit 2; }

# The pins are the `docs` extra of pyproject.toml (one place to change them).
mapfile -t requirements < <("$PY" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["docs"]))' pyproject.toml)
if ! "$PY" - "${requirements[@]}" <<'CHECK'
import importlib.metadata as metadata
import re
import sys

for requirement in sys.argv[1:]:
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    pinned = requirement.partition("==")[2]  # an exact pin must match; a lower bound is pip's to keep
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if pinned and installed != pinned:
        sys.exit(1)
CHECK
then
  echo "build_docs: installing ${requirements[*]}"
  "$ROOT/.venv/bin/pip" install -q "${requirements[@]}"
fi

start=$(date +%s)
rm -rf docs/pages/reference
"$PY" docs/references.py docs/pages/reference
# The theme's end-of-life notice is kept in docs/mkdocs.yml, not printed on every build.
NO_MKDOCS_2_WARNING=1 "$ROOT/.venv/bin/mkdocs" build --strict --quiet -f docs/mkdocs.yml
echo "build_docs: the site is in $ROOT/site (open site/index.html) after $(( $(date +%s) - start )) s"
