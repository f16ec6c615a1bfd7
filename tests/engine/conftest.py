"""The engine tests' tiny MoE, one shared embedded engine, and jitted references on the same policy.

The model mixes layer kinds (layer 1 dense) so the routing axis is the MoE layers only (2 of 3), and
its weights are drawn wider than HF's 0.02 (initializer_range 0.1) so router top-k margins are clear
and no routing comparison hinges on a near-tie. One `JaxEngine` (4 slots, max_len 64, buckets 16/32/64)
serves every engine, server and client test of the session, so its programs compile once; a test that
changes its weights puts the originals back.
"""

import pytest
from engine_reference import MAX_LEN, SLOTS, Reference

from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.model import load_hf


@pytest.fixture(scope="session")
def engine_spec(tiny_model_tool):
    return tiny_model_tool.TinyModelSpec(
        num_layers=3, mlp_only_layers=(1,), initializer_range=0.1, max_positions=256
    )


@pytest.fixture(scope="session")
def engine_model_dir(tmp_path_factory, tiny_model_tool, engine_spec):
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("engine-moe"), engine_spec, seed=0)


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory, tiny_model_tool, engine_spec):
    """Same architecture, other weights (seed 1): the target of weight updates."""
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("engine-moe-1"), engine_spec, seed=1)


@pytest.fixture(scope="session")
def engine(engine_model_dir):
    eng = JaxEngine.from_dir(engine_model_dir, max_running=SLOTS, max_len=MAX_LEN, min_bucket=16)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def policy(engine_model_dir):
    return load_hf(engine_model_dir)


@pytest.fixture(scope="session")
def reference(policy):
    return Reference(policy)
