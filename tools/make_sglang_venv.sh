#!/usr/bin/env bash
# Creates .venv-sglang: real SGLang 0.5.23 on Python 3.11 that serves a small Qwen3 / Qwen3-MoE on a CPU-only
# machine, for the `sglang` tests (tests/engine/test_sglang_real.py; README "Real SGLang on a CPU machine").
# Slow torch paths: for correctness, never for speed. sglang is never a runtime dependency of legorl_jax.
# Idempotent: a venv whose stamp matches the pinned requirements and the support files is left alone.
#
#   bash tools/make_sglang_venv.sh                      # ./.venv-sglang
#   VENV_SGLANG=/elsewhere bash tools/make_sglang_venv.sh
#
# What it installs, and why each piece:
# - torch 2.14.1 + torchvision 0.29.1 (what sglang 0.5.23 pins; the CPU torch 2.13 wheel does not do: the
#   torchvision the index offers for it links CUDA). It is the CUDA build; without a GPU torch runs on CPU.
# - sglang 0.5.23 with --no-deps, then only the runtime dependencies the server imports on this path (its
#   metadata pulls flashinfer, flash-attn, deep-gemm, the CUDA kernel wheel, ... : gigabytes no CPU uses).
# - tools/sglang_cpu/sgl_kernel: a stand-in for SGLang's kernel package (its CPU build is served by no index),
#   whose functions raise if called; with `--device cpu --attention-backend torch_native` none is called.
# - tools/sglang_cpu/sglang_cpu_hostmem.py (+ .pth, so every SGLang process runs it): the routed-experts
#   host buffer is allocated without cudaHostRegister on device "cpu" (SGLang hard-codes pin_memory=True,
#   which crashes without a GPU). Neither file changes a computation; their docstrings say what they do.
#
# Interpreter order: $PYTHON311, python3.11 on PATH, then pyenv's installed 3.11 versions.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV_SGLANG:-.venv-sglang}"
SUPPORT=tools/sglang_cpu
TORCH=("torch==2.14.1" "torchvision==0.29.1")
SGLANG="sglang==0.5.23"
# The runtime dependencies of sglang.launch_server on the CPU path, at sglang 0.5.23's pins where it pins.
DEPS=(
  "aiohttp" "anthropic>=0.20.0" "apache-tvm-ffi==0.1.11" "blobfile==3.0.0" "compressed-tensors==0.18.0"
  "dill" "einops" "fastapi" "gguf" "interegular" "IPython" "jsonschema" "msgspec" "numpy<3" "openai==2.8.0"
  "openai-harmony==0.0.4" "orjson" "packaging" "partial_json_parser" "pillow" "prometheus-client>=0.20.0"
  "psutil" "pybase64" "pydantic" "python-dateutil<3" "python-multipart" "pyzmq>=25.1.2" "regex" "requests"
  "safetensors" "scipy" "sentencepiece==0.2.1" "setproctitle" "soundfile==0.13.1" "tiktoken"
  "tokenizers==0.23.2" "tqdm" "transformers==5.19.0" "uvicorn>=0.51" "uvloop" "watchfiles" "xgrammar==0.2.7"
  "xxhash" "zstandard"
)
STAMP="$VENV/.stamp"
want="$(printf '%s\n' "${TORCH[@]}" "$SGLANG" "${DEPS[@]}"; cat "$SUPPORT"/sgl_kernel/__init__.py "$SUPPORT"/sglang_cpu_hostmem.py "$SUPPORT"/sglang_cpu_hostmem.pth | sha256sum)"

source tools/python311.sh

if [ -x "$VENV/bin/python" ] && is311 "$VENV/bin/python" && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "make_sglang_venv: $VENV is up to date"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ] || ! is311 "$VENV/bin/python"; then
  py="$(find_python311)"
  rm -rf "$VENV"
  echo "make_sglang_venv: creating $VENV with $py"
  "$py" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip "$@"; }
# torch first and alone, so nothing else can steer which torch is resolved.
pip install -q "${TORCH[@]}"
pip install -q --no-deps "$SGLANG"
# The constraint keeps the dependencies from replacing torch with another build.
pip install -q "${DEPS[@]}" "${TORCH[0]}"
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf "$site/sgl_kernel"
cp -r "$SUPPORT/sgl_kernel" "$site/sgl_kernel"
cp "$SUPPORT/sglang_cpu_hostmem.py" "$SUPPORT/sglang_cpu_hostmem.pth" "$site/"
# The server's imports, in a fresh process (the .pth runs first), are the check that the environment works.
SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c '
import sys, torch, sglang, sglang.launch_server, sglang.srt.mem_cache.pool_host.common as c, sglang_cpu_hostmem
import sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler, sglang.srt.managers.detokenizer_manager
import sglang.srt.model_executor.model_runner, sglang.srt.models.qwen3_moe, sglang.srt.models.qwen3
assert c.ALLOC_MEMORY_FUNCS["cpu"] is sglang_cpu_hostmem.alloc_plain_host, "host-memory fix not applied"
print("make_sglang_venv: sglang", sglang.__version__, "torch", torch.__version__, "python", sys.version.split()[0])'
printf '%s' "$want" >"$STAMP"
