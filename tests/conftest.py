"""Test-wide set-up: JAX sees 8 CPU devices, so sharding is tested for real (STYLE rule 21).

The environment variables must be set before jax is first imported anywhere, which is why this happens
at module import time of the root conftest.
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pathlib  # noqa: E402

import pytest  # noqa: E402

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> pathlib.Path:
    """Committed independent references (written by tools/make_hf_fixtures.py)."""
    return FIXTURES
