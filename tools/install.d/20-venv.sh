# Main venv: the package with its base dependencies, Ray, the data, dev and wandb extras. Lives in the checkout so
# every sandbox node (shared filesystem, private /tmp) runs the same interpreter.
set -euo pipefail
PY="${BEAM_PYTHON:-$(command -v python3.11 || command -v python3)}"
[ -x "$ROOT/.venv/bin/python" ] || "$PY" -m venv "$ROOT/.venv"
"$ROOT/.venv/bin/pip" install -q --upgrade pip
"$ROOT/.venv/bin/pip" install -q -e "$ROOT[ray,data,dev,wandb]"
