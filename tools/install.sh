#!/usr/bin/env bash
# Install everything the project needs on a fresh Debian machine: system packages (Slurm sandbox),
# the main venv (.venv, Python 3.11+) and the SkyRL venv (.venv-skyrl, Python 3.12).
# Idempotent: each part records a stamp keyed on its own content and is skipped when unchanged.
# Usage: tools/install.sh [part ...]   (parts: the file names in tools/install.d without .sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT
STAMPS="$ROOT/.venv-stamps"
mkdir -p "$STAMPS"
parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
  for f in "$ROOT"/tools/install.d/*.sh; do parts+=("$(basename "$f" .sh)"); done
fi
for part in "${parts[@]}"; do
  script="$ROOT/tools/install.d/$part.sh"
  [ -f "$script" ] || { echo "install: no part named $part (see tools/install.d)" >&2; exit 2; }
  # Keyed on the part and on pyproject.toml (its dependencies), so a new dependency reaches an installed machine.
  sum=$(cat "$script" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)
  if [ -f "$STAMPS/$part.$sum" ]; then
    echo "install: $part up to date"
    continue
  fi
  # The free space is printed because a full disk fails pip half-way with only "No space left on device".
  echo "install: $part ... ($(df -h --output=avail "$ROOT" | tail -1 | tr -d ' ') free on $ROOT)"
  start=$(date +%s)
  bash "$script"
  rm -f "$STAMPS/$part".*
  touch "$STAMPS/$part.$sum"
  echo "install: $part done in $(( $(date +%s) - start )) s"
done
