#!/usr/bin/env bash
# Install everything the project needs on a fresh Debian machine: system packages (Slurm sandbox),
# the main venv (.venv, Python 3.11+) and the SkyRL venv (.venv-skyrl, Python 3.12).
# Idempotent: each part records a stamp keyed on its own content and is skipped when unchanged.
# Usage: tools/install.sh [part ...]   (parts: the file names in tools/install.d without .sh)
# Without parts it runs every part except the optional ones (OPTIONAL_PARTS), which run when named or when their
# variable is 1: 15-slurm-24.11-root (the Slurm 24.11 root for `slurm_sandbox.py --slurm-version 24.11`) with
# BEAM_SLURM_2411=1. A part that exits 75 could not run on this machine: reported as skipped, not stamped.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT
STAMPS="$ROOT/.venv-stamps"
mkdir -p "$STAMPS"
parts=("$@")
declare -A OPTIONAL_PARTS=([15-slurm-24.11-root]=BEAM_SLURM_2411)
# Parts that keep their own stamp where their result lives (the 24.11 root is shared by every checkout and may be
# removed or rebuilt from another one): they always run and say themselves when they are up to date.
declare -A SELF_STAMPED=([15-slurm-24.11-root]=1)
if [ ${#parts[@]} -eq 0 ]; then
  for f in "$ROOT"/tools/install.d/*.sh; do
    part="$(basename "$f" .sh)"
    gate="${OPTIONAL_PARTS[$part]:-}"
    if [ -n "$gate" ] && [ "${!gate:-}" != 1 ]; then
      echo "install: $part skipped (optional: set $gate=1 or run tools/install.sh $part)"
      continue
    fi
    parts+=("$part")
  done
fi
for part in "${parts[@]}"; do
  script="$ROOT/tools/install.d/$part.sh"
  [ -f "$script" ] || { echo "install: no part named $part (see tools/install.d)" >&2; exit 2; }
  # Keyed on the part and on pyproject.toml (its dependencies), so a new dependency reaches an installed machine.
  sum=$(cat "$script" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)
  if [ -z "${SELF_STAMPED[$part]:-}" ] && [ -f "$STAMPS/$part.$sum" ]; then
    echo "install: $part up to date"
    continue
  fi
  # The free space is printed because a full disk fails pip half-way with only "No space left on device".
  echo "install: $part ... ($(df -h --output=avail "$ROOT" | tail -1 | tr -d ' ') free on $ROOT)"
  start=$(date +%s)
  rc=0
  bash "$script" || rc=$?
  if [ "$rc" -eq 75 ]; then
    echo "install: $part skipped: it cannot run on this machine (see above); not stamped"
    continue
  fi
  [ "$rc" -eq 0 ] || exit "$rc"
  rm -f "$STAMPS/$part".*
  [ -n "${SELF_STAMPED[$part]:-}" ] || touch "$STAMPS/$part.$sum"
  echo "install: $part done in $(( $(date +%s) - start )) s"
done
