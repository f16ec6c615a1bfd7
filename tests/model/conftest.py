"""Tiny Qwen3 / Qwen3-MoE architectures built in-test, and a jitted forward over (graphdef, state).

The MoE config mixes layer kinds (layer 1 dense through `mlp_only_layers`), so every test that uses it
also runs a stack of three layer runs. Weights are drawn wider than HF's 0.02 so routing margins are
clear and no routing comparison hinges on a near-tie.
"""

import jax
import numpy as np
import pytest
from flax import nnx

from legorl_jax.model import ArchConfig, init_policy

MOE_RAW = dict(
    architectures=["Qwen3MoeForCausalLM"],
    vocab_size=256,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    max_position_embeddings=256,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    norm_topk_prob=True,
    mlp_only_layers=[1],
)
DENSE_RAW = {
    k: v
    for k, v in MOE_RAW.items()
    if k
    not in (
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "norm_topk_prob",
        "mlp_only_layers",
    )
} | {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2}
TEST_STD = 0.2


@pytest.fixture
def moe_raw() -> dict:
    """The tiny MoE's config.json contents (a fresh copy per test)."""
    return dict(MOE_RAW)


@pytest.fixture(scope="session")
def moe_raw_shared() -> dict:
    """The tiny MoE's config.json contents for module- or session-scoped fixtures (copy before changing)."""
    return dict(MOE_RAW)


@pytest.fixture
def dense_raw() -> dict:
    return dict(DENSE_RAW)


@pytest.fixture(scope="session")
def moe_config() -> ArchConfig:
    return ArchConfig.from_hf_dict(MOE_RAW)


@pytest.fixture(scope="session")
def dense_config() -> ArchConfig:
    return ArchConfig.from_hf_dict(DENSE_RAW)


@pytest.fixture(scope="session")
def moe_policy(moe_config):
    """Shared and never mutated; tests that change weights or placement build their own."""
    return init_policy(moe_config, seed=1, init_std=TEST_STD)


@pytest.fixture(scope="session")
def dense_policy(dense_config):
    return init_policy(dense_config, seed=2, init_std=TEST_STD)


def _jitted(policy):
    graphdef, state = nnx.split(policy)

    @jax.jit
    def forward(state, input_ids, positions, segment_ids, forced_experts):
        return nnx.merge(graphdef, state)(
            input_ids, positions=positions, segment_ids=segment_ids, forced_experts=forced_experts
        )

    def call(input_ids, *, positions=None, segment_ids=None, forced_experts=None, state=state):
        return forward(state, input_ids, positions, segment_ids, forced_experts)

    return call


@pytest.fixture(scope="session")
def jit_forward():
    """jit_forward(policy) -> forward(input_ids, positions=, segment_ids=, forced_experts=, state=).

    One jitted function per policy for the whole session, so tests sharing a policy and shapes share
    compilations (the suite runs on two shared cores).
    """
    made = {}

    def get(policy):
        if id(policy) not in made:
            made[id(policy)] = (policy, _jitted(policy))
        return made[id(policy)][1]

    return get


@pytest.fixture
def tokens():
    """tokens(b, t, seed) -> int32[b, t] ids of the tiny vocabulary."""

    def make(b, t, seed=0, vocab=MOE_RAW["vocab_size"]):
        return np.random.default_rng(seed).integers(0, vocab, (b, t)).astype(np.int32)

    return make
