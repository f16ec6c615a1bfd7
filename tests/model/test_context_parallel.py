"""Context parallelism (model/context_parallel.py): a row split along its tokens over the `context` mesh
axis computes what one device computes: log-probs, gradients and routing of the tiny MoE."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from legorl_jax.config import MeshConfig
from legorl_jax.model import context_parallel, init_policy
from legorl_jax.model.architecture import ArchConfig
from legorl_jax.model.moe import default_dispatch
from legorl_jax.model.sharding import make_mesh, place_on_mesh, rules_from_config, use_rules

TINY_MOE = ArchConfig(
    architectures=("Qwen3MoeForCausalLM",),
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
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
)


def test_the_layout_gives_each_device_an_early_and_a_late_chunk():
    order = context_parallel.layout(16, 4)  # 8 chunks of 2 tokens
    assert order.reshape(4, 4).tolist() == [
        [0, 1, 14, 15],
        [2, 3, 12, 13],
        [4, 5, 10, 11],
        [6, 7, 8, 9],
    ]
    x = jnp.arange(32).reshape(2, 16)
    np.testing.assert_array_equal(context_parallel.from_layout(context_parallel.to_layout(x, 4), 4), x)


def test_a_row_that_does_not_split_into_two_chunks_per_device_is_refused():
    with pytest.raises(ValueError, match="not a multiple of 2 x 4 shards"):
        context_parallel.layout(12, 4)


def packed_batch(seed: int, rows: int, length: int):
    """Token ids, targets and segment ids of rows packed with a few sequences each, padding at the end."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, TINY_MOE.vocab_size, (rows, length))
    segments = np.zeros((rows, length), np.int32)
    for r in range(rows):
        cuts = np.sort(rng.choice(np.arange(1, length - 4), 3, replace=False))
        for s, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, length - 4], strict=True)):
            segments[r, lo:hi] = s + 1
    targets = np.roll(ids, -1, axis=1)
    return jnp.asarray(ids, jnp.int32), jnp.asarray(targets, jnp.int32), jnp.asarray(segments)


def logprobs_grads_routing(policy, ids, targets, segments, mesh=None, rules=None):
    graphdef, params, rest = nnx.split(policy, nnx.Param, ...)

    def loss(params):
        model = nnx.merge(graphdef, params, rest)
        out = model.token_logprobs(ids, targets, segment_ids=segments, details=True)
        mask = (segments > 0).astype(jnp.float32)
        return (out.logprobs * mask).sum() + out.output.aux_loss, (out.logprobs, out.output.routed_experts)

    fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
    if mesh is None:
        return fn(params)
    with jax.set_mesh(mesh), use_rules(rules):
        return fn(params)


LONG_LAYOUT = {
    "fsdp": 1,
    "expert": 8,
    "rules": [["batch", ["data", "fsdp"]], ["embed", ["fsdp", "expert"]], ["seq", ["context", "expert"]]],
}


@pytest.mark.parametrize(
    ("preset", "length", "expected_shards", "dispatch"),
    [
        ({"fsdp": 2, "expert": 2, "context": 2}, 64, 2, None),
        ({"fsdp": 1, "context": 8}, 64, 8, None),
        # conf/mesh/h200x8_long's layout: the batch takes no expert axis, the tokens the expert axis. MoE
        # gathers the group's 256 tokens to the experts (under the 384 weight rows: moe.default_dispatch)
        # or, for the 512 tokens of rows twice as long, brings the experts' weights to each device's tokens.
        (LONG_LAYOUT, 64, 8, "tokens"),
        (LONG_LAYOUT, 128, 8, "experts"),
    ],
    ids=["fsdp_expert_context", "context8", "h200x8_long_tokens_dispatch", "h200x8_long_experts_dispatch"],
)
def test_context_parallel_forward_gradients_and_routing_equal_one_device(
    preset, length, expected_shards, dispatch
):
    """On the 8 CPU devices, with context beside fsdp and expert, with all 8 on context, and with the
    tokens on the expert axis (under either MoE dispatch): the row is split along its tokens, and
    log-probs, routing and every gradient equal the single-device run."""
    policy = init_policy(TINY_MOE, seed=0)
    ids, targets, segments = packed_batch(3, 4, length)
    (loss1, (lp1, routed1)), grads1 = logprobs_grads_routing(policy, ids, targets, segments)

    mesh_config = MeshConfig(**preset)
    mesh, rules = make_mesh(mesh_config), rules_from_config(mesh_config)
    sharded = init_policy(TINY_MOE, seed=0)
    place_on_mesh(sharded, mesh, rules)
    with jax.set_mesh(mesh), use_rules(rules):
        assert context_parallel.shards(4, length) == expected_shards
    if dispatch is not None:  # the expert axis spans the whole batch's tokens, 4 x length
        rows = 3 * TINY_MOE.num_experts * TINY_MOE.moe_intermediate_size
        assert default_dispatch(4 * length, rows, replicated=False) == dispatch
    (loss8, (lp8, routed8)), grads8 = logprobs_grads_routing(sharded, ids, targets, segments, mesh, rules)

    np.testing.assert_array_equal(np.asarray(routed8), np.asarray(routed1))
    real = np.asarray(segments > 0)
    np.testing.assert_allclose(np.asarray(lp8)[real], np.asarray(lp1)[real], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss8, loss1, rtol=1e-5)
    for (path, g8), g1 in zip(
        jax.tree_util.tree_flatten_with_path(grads8)[0], jax.tree.leaves(grads1), strict=True
    ):
        scale = float(np.abs(np.asarray(g1)).max()) or 1.0
        np.testing.assert_allclose(
            np.asarray(g8), np.asarray(g1), rtol=0, atol=1e-5 * scale, err_msg=jax.tree_util.keystr(path)
        )
