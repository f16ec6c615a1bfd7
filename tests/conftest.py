"""Test-wide set-up: JAX sees 8 CPU devices, so sharding is tested for real (docs/style.md rule 21).

The environment variables must be set before jax is first imported anywhere, which is why this happens
at module import time of the root conftest.
"""

import os

# Appended, so flags the caller set (an ISA limit, single-threaded Eigen) still reach XLA; a device count
# the caller set is kept, to run the single-device tests on 1 device (the 8-device ones then fail).
_flags = os.environ.get("XLA_FLAGS", "")
if "--xla_force_host_platform_device_count" not in _flags:
    _flags += " --xla_force_host_platform_device_count=8"
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# litellm (what mini-swe-agent and SWE-agent call) fetches a price list from the internet on import unless
# told to use its packaged copy; no test may reach outside this machine.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pathlib  # noqa: E402

import pytest  # noqa: E402

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CONF = pathlib.Path(__file__).parents[1] / "conf"


@pytest.fixture(scope="session")
def fixtures_dir() -> pathlib.Path:
    """Committed independent references (written by tools/make_hf_fixtures.py)."""
    return FIXTURES


@pytest.fixture(scope="session")
def compose_config():
    """compose_config(overrides) -> the typed root `Config` Hydra composes from conf/ with those overrides."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from legorl_jax.config import register_configs

    register_configs()

    def compose_root(overrides=()):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return OmegaConf.to_object(compose("config", overrides=list(overrides)))

    return compose_root


# ----------------------------------------------------------------------------------------------------
# Tiny HF model directories (tools/make_tiny_model.py), generated once per session in a temp dir.
# Use: def test_x(tiny_moe_dir): ...load(tiny_moe_dir)...; custom sizes via tiny_model_tool:
#     tool.make_tiny_model(tmp_path, tool.TinyModelSpec(num_layers=4, tie_embeddings=True), seed=1)
# ----------------------------------------------------------------------------------------------------


def _load_tool(name: str):
    """A tools/<name>.py script as a module (tools/ is not a package)."""
    import importlib.util
    import sys

    if name not in sys.modules:
        path = pathlib.Path(__file__).parents[1] / "tools" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve their annotations through sys.modules
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def load_tool():
    """`load_tool("bench_harnesses")`: a tools/ script as a module, loaded once per session."""
    return _load_tool


@pytest.fixture(scope="session")
def tiny_model_tool():
    """The tools/make_tiny_model.py module: make_tiny_model(out, TinyModelSpec(...), seed=...), spec_argv,
    ..."""
    return _load_tool("make_tiny_model")


@pytest.fixture(scope="session")
def tiny_moe_dir(tmp_path_factory, tiny_model_tool) -> pathlib.Path:
    """Default tiny Qwen3-MoE HF directory (vocab 4096, hidden 64, 2 layers, 8 experts, top-2), seed 0."""
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("tiny-moe"), seed=0)


@pytest.fixture(scope="session")
def tiny_dense_dir(tmp_path_factory, tiny_model_tool) -> pathlib.Path:
    """Default tiny Qwen3 dense HF directory (same sizes, --dense), seed 0."""
    spec = tiny_model_tool.TinyModelSpec(dense=True)
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("tiny-dense"), spec, seed=0)


@pytest.fixture
def second_daemon():
    """A second Docker daemon on this machine for this test alone (`tests/second_daemon.py`): started fresh
    (a run killed earlier may have left one), holding only the base image loaded from the first daemon;
    stopped with its data root after the test. Skips without root or dockerd."""
    import shutil

    from second_daemon import start_second_daemon, stop_second_daemon

    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        pytest.skip(
            f"a second Docker daemon needs root and dockerd (uid {os.geteuid()}, "
            f"dockerd {shutil.which('dockerd') or 'missing'})"
        )
    from legorl_jax.sandbox import images

    images.ensure_base_image()  # on the first daemon, where the second loads it from
    name = "legorl-docker2-test"
    stop_second_daemon(name, purge=True)
    daemon = start_second_daemon(name)
    yield daemon
    stop_second_daemon(daemon, purge=True)
