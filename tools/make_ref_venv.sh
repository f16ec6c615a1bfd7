#!/usr/bin/env bash
# Creates .venv-ref: Python 3.11 + CPU torch + HF transformers, the independent reference that
# tools/make_hf_fixtures.py runs in. torch is never a runtime dependency of legorl_jax; this venv exists only
# to write tests/fixtures/. Idempotent: a venv whose stamp matches the pinned requirements is left alone.
#
# Interpreter order: $PYTHON311, python3.11 on PATH, then pyenv's installed 3.11 versions.
# The torch wheel must be a CPU build (a CUDA one drags in gigabytes of nvidia-* wheels and is not what the
# fixtures were made with), so after installing we check torch.version.cuda is None and fail otherwise.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV_REF:-.venv-ref}"
# transformers 5.24.0 is the newest 5.x installable here (5.25 requires kernels>=0.19.1, which the index
# lacks); it is the version the HF config facts of legorl_jax/model/ were measured with and the committed fixtures were made with.
REQS=(
  "torch==2.13.0"
  "transformers==5.24.0"
  "tokenizers>=0.22,<0.24"
  "safetensors>=0.6"
  "jinja2>=3.1"
  "numpy>=2.0,<3"
)
STAMP="$VENV/.stamp"
want="$(printf '%s\n' "${REQS[@]}")"

source tools/python311.sh

if [ -x "$VENV/bin/python" ] && is311 "$VENV/bin/python" && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "make_ref_venv: $VENV is up to date"
  exit 0
fi

py="$(find_python311)"
if [ ! -x "$VENV/bin/python" ] || ! is311 "$VENV/bin/python"; then
  rm -rf "$VENV"
  echo "make_ref_venv: creating $VENV with $py"
  "$py" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first and alone, so its resolution cannot be steered by transformers' optional extras.
"$VENV/bin/python" -m pip install -q "${REQS[0]}" "${REQS[5]}"
"$VENV/bin/python" -c 'import sys, torch; sys.exit(0 if torch.version.cuda is None else "torch in .venv-ref is a CUDA build (%s); install the CPU wheel" % torch.version.cuda)'
"$VENV/bin/python" -m pip install -q "${REQS[@]}"
"$VENV/bin/python" -c 'import torch, transformers; print("make_ref_venv: torch", torch.__version__, "transformers", transformers.__version__)'
printf '%s' "$want" >"$STAMP"
