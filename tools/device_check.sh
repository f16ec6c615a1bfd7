#!/usr/bin/env bash
# The one prepared accelerator check. Run from the repository root of a fresh GPU machine:
#
#     tools/device_check.sh RESULTS_DIR
#
# It installs the project, runs the compiled GPU variants of the tests (-m gpu) and the benchmarks, and
# writes into RESULTS_DIR one log per step (NAME.log), the benchmark tables (*.md), the test report
# (NAME.xml) and summary.txt (one line per step: name, exit status, seconds). Steps run in order; a failing
# step is recorded and the next one still runs; the script exits non-zero if any step failed. Budget: the
# steps' timeouts add up to 580 s, under the 10 minutes a device command may run.
#
# Extending it: append a `step NAME TIMEOUT_S command...` line in the "steps" section at the bottom (for
# example the trainer's sharded-step timing, writing its table to "$RESULTS/<name>.md").
#
# Environment: PYTHON (default python3), JAX_EXTRA (default cuda12: the jax[...] extra installed with our jax
# pin), WHEELS (default .whl: if that folder exists, pip installs from it only, for machines without a
# registry). Without a registry and without wheels, the project is installed without dependencies and runs
# on the machine's own jax, whose version is logged.
set -uo pipefail

RESULTS=${1:?usage: tools/device_check.sh RESULTS_DIR}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
PY=${PYTHON:-python3}
JAX_EXTRA=${JAX_EXTRA:-cuda12}
WHEELS=${WHEELS:-.whl}
JAX_PIN=$(sed -n 's/^ *"jax\(>=[^"]*\)",$/\1/p' pyproject.toml | head -1)  # e.g. >=0.12,<0.13
export PYTHONUNBUFFERED=1
export JAX_PLATFORMS=cuda  # tests/conftest.py defaults JAX to the CPU unless this is set
FAILED=0
: >"$RESULTS/summary.txt"

step() {  # step NAME TIMEOUT_S command...: runs it, logs to NAME.log, records its status
  local name=$1 limit=$2 start rc
  shift 2
  echo "== $name (timeout ${limit}s): $*"
  start=$(date +%s)
  # Through bash so that a step may be one of the functions below (exported with export -f).
  timeout --kill-after=10 "$limit" bash -c '"$@"' "$name" "$@" >"$RESULTS/$name.log" 2>&1
  rc=$?
  tail -n 25 "$RESULTS/$name.log"
  echo "$name rc=$rc $(( $(date +%s) - start ))s" | tee -a "$RESULTS/summary.txt"
  [ "$rc" -eq 0 ] || FAILED=1
  return "$rc"
}

install_project() {
  local source=()
  [ -d "$WHEELS" ] && source=(--no-index --find-links "$WHEELS")
  if "$PY" -m pip install -q --no-build-isolation "${source[@]}" -e '.[test]' "jax[$JAX_EXTRA]$JAX_PIN"; then
    return 0
  fi
  echo "installing with dependencies failed (no registry?): installing the project alone on the machine's jax"
  "$PY" -m pip install -q --no-build-isolation --no-deps -e .
}

check_gpu() {
  "$PY" - <<'EOF'
import jax
devices = jax.devices()
print("jax", jax.__version__, "backend", jax.default_backend(), devices)
if jax.default_backend() != "gpu":
    raise SystemExit(f"no GPU backend: {jax.default_backend()!r}")
EOF
}

export PY JAX_EXTRA WHEELS JAX_PIN
export -f install_project check_gpu

# ---- steps (append new ones at the end) ---------------------------------------------------------------
step install 120 install_project
step gpu_visible 30 check_gpu || { echo "no GPU: skipping the accelerator steps"; exit 1; }
step kernels_gpu_tests 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/kernels \
  --junitxml="$RESULTS/kernels_gpu_tests.xml"
step bench_logprobs 240 "$PY" tools/bench_logprobs.py --markdown "$RESULTS/bench_logprobs.md"
# The packed-attention Pallas (Triton) kernel vs the blockwise XLA op (its numerics are in kernels_gpu_tests).
step bench_attention 40 "$PY" tools/bench_attention.py --lengths 4096,16384 --rounds 3 --reps 2 \
  --markdown "$RESULTS/bench_attention.md"

exit "$FAILED"
