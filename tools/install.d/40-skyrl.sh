# SkyRL venv (.venv-skyrl, Python 3.12): SkyRL 0.3.0's real config classes and callback classes, used to check
# every override we emit and to test our entrypoint's callback on CPU. Not a GPU training environment: the
# trainer itself runs in the recipe's container.
# skyrl is installed without its dependencies (they pull vLLM, flash-attn, Megatron); what follows is exactly
# what `SkyRLTrainConfig.from_cli_overrides` imports: building the config runs __post_init__, which imports
# skyrl.backends (pydantic, torch, aiohttp, ray), and config.py imports skyrl_gym's env configs (pandas, requests);
# validate_cfg (cross-field checks) also imports the policy-loss registry (jaxtyping).
# torch is the bulk (~4.5 GB with its CUDA libraries; PyPI has no CPU-only build for 3.12); it is imported, never run.
set -euo pipefail
# A pyenv shim named python3.12 exists even when 3.12 is not the active version and then fails: try each
# candidate by running it.
PY312=""
for candidate in "${BEAM_PYTHON312:-}" "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 \
                 /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12 \
                 "$(command -v python3.12 || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    PY312="$candidate"; break
  fi
done
[ -n "$PY312" ] || { echo "40-skyrl: Python 3.12 not found; set BEAM_PYTHON312=/path/to/python3.12" >&2; exit 2; }
VENV="$ROOT/.venv-skyrl"
[ -x "$VENV/bin/python" ] || "$PY312" -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q)
"${PIP[@]}" --upgrade pip
# skyrl's pin is the `skyrl` extra of pyproject.toml (why 0.3.0: see there); skyrl-gym is the release built with it.
SKYRL_SPEC=$("$VENV/bin/python" -c 'import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["skyrl"][0])' "$ROOT/pyproject.toml")
"${PIP[@]}" --no-deps "$SKYRL_SPEC" "skyrl-gym==0.4.0"
# torch first, alone, without triton: triton (0.9 GB) compiles GPU kernels and `import torch` never loads it; the CUDA
# libraries it does load stay. Kept out of pip's cache: on a clean machine that cache would hold 3 GB more of wheels.
"${PIP[@]}" --no-cache-dir --no-deps torch
TORCH_DEPS=()
while IFS= read -r dep; do TORCH_DEPS+=("$dep"); done < <("$VENV/bin/python" -c '
import importlib.metadata as m
for req in m.requires("torch") or []:
    spec, _, marker = req.partition(";")
    if "extra ==" in marker or spec.strip().startswith("triton"):
        continue
    print(spec.strip())')
"${PIP[@]}" --no-cache-dir "${TORCH_DEPS[@]}"
echo "40-skyrl: triton left out on purpose; pip's later note that torch requires it is expected"
"${PIP[@]}" omegaconf pyyaml loguru pandas requests pydantic aiohttp "ray==2.56.0" jaxtyping pytest
# Our own trainer-side modules (entrypoint, notice protocol, rehearsal) import in this venv too.
"${PIP[@]}" --no-deps -e "$ROOT"
"$VENV/bin/python" -c "from skyrl.train.config.config import SkyRLTrainConfig; SkyRLTrainConfig.from_cli_overrides([]); import beam_slurm.core.notice"
