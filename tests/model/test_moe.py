"""The MoE block: routing replay (R3), gate weights, grouped experts, the HF aux loss, forced-id checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from legorl_jax.model import moe
from legorl_jax.model.moe import (
    CHUNK_ELEMENTS,
    GROUPED_IMPLS,
    MoEBlock,
    chunk_tokens,
    default_grouped_impl,
    grouped_experts,
    load_balancing_loss,
    route,
    router_stats,
    tile_rows,
)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_replayed_routing_reproduces_logits(moe_policy, jit_forward, tokens):
    forward = jit_forward(moe_policy)
    ids = tokens(2, 12, seed=3)
    first = forward(ids)
    assert first.routed_experts.dtype == np.int32 and first.routed_experts.shape == (
        2,
        2,
        12,
        2,
    )  # [L_moe, B, T, K]
    replayed = forward(ids, forced_experts=first.routed_experts)
    # Same ids -> the same gathered gate weights and the same expert matmuls: bitwise, not merely close.
    np.testing.assert_array_equal(np.asarray(replayed.logits), np.asarray(first.logits))
    np.testing.assert_array_equal(np.asarray(replayed.routed_experts), np.asarray(first.routed_experts))
    assert float(replayed.aux_loss) == float(first.aux_loss)


def test_rows_of_minus_one_route_natively_next_to_replayed_rows(moe_policy, jit_forward, tokens):
    forward = jit_forward(moe_policy)
    ids = tokens(2, 12, seed=3)
    first = forward(ids)
    native = np.asarray(first.routed_experts)  # [L_moe, B, T, K]
    num_experts = moe_policy.config.num_experts
    # Row 0: odd tokens forced to a routing the model would not choose (every id shifted by one, still
    # distinct), even tokens unrecorded (-1); row 1 wholly unrecorded. Replaying the model's own routing
    # instead would let a layer that ignores `forced_experts` pass.
    forced = np.full_like(native, -1)
    forced[:, 0, 1::2] = (native[:, 0, 1::2] + 1) % num_experts
    out = forward(ids, forced_experts=jnp.asarray(forced))
    routed = np.asarray(out.routed_experts)
    np.testing.assert_array_equal(routed[:, 0, 1::2], forced[:, 0, 1::2])
    # The first MoE layer's router input does not depend on routing (attention comes before it), so its
    # unrecorded tokens must pick exactly the model's own experts; later layers see the forced tokens.
    np.testing.assert_array_equal(routed[0, 0, ::2], native[0, 0, ::2])
    # Row 1 (no forced token) is the model's own forward; row 0's outputs moved with its forced tokens.
    np.testing.assert_array_equal(routed[:, 1], native[:, 1])
    # Row 1 takes the same arithmetic in a batch whose other row differs: order-1 logits (fp32 simple-op).
    np.testing.assert_allclose(np.asarray(out.logits)[1], np.asarray(first.logits)[1], atol=1e-5, rtol=0)
    assert not np.allclose(np.asarray(out.logits)[0, 1:], np.asarray(first.logits)[0, 1:], atol=1e-3)


def test_replayed_set_in_another_slot_order_gives_the_same_logits(moe_policy, jit_forward, tokens):
    forward = jit_forward(moe_policy)
    ids = tokens(2, 12, seed=3)
    first = forward(ids)
    swapped = forward(ids, forced_experts=first.routed_experts[..., ::-1])
    # Slot order only re-orders the k = 2 weighted expert outputs' sum: order-1 logits (fp32 simple-op).
    np.testing.assert_allclose(np.asarray(swapped.logits), np.asarray(first.logits), atol=1e-5, rtol=0)


def test_forcing_a_different_routing_changes_outputs_and_the_router_still_gets_gradient(
    moe_policy, jit_forward, tokens, moe_config
):
    forward = jit_forward(moe_policy)
    ids = tokens(2, 12, seed=3)
    native = forward(ids)
    # The two experts each token ranked last: a routing the model would never choose.
    forced = (np.asarray(native.routed_experts) + 3) % moe_config.num_experts
    forced[..., 1] = (forced[..., 0] + 1) % moe_config.num_experts
    forced = jnp.asarray(forced, jnp.int32)
    out = forward(ids, forced_experts=forced)
    np.testing.assert_array_equal(np.asarray(out.routed_experts), np.asarray(forced))
    assert float(jnp.max(jnp.abs(out.logits - native.logits))) > 1e-3

    graphdef, params, rest = nnx.split(moe_policy, nnx.Param, ...)
    probe = jnp.asarray(np.random.default_rng(0).standard_normal(native.logits.shape), jnp.float32)

    def objective(params):
        return jnp.sum(nnx.merge(graphdef, params, rest)(ids, forced_experts=forced).logits * probe)

    grads = jax.jit(jax.grad(objective))(params)
    for run in (0, 2):  # the two MoE runs (layer 1 is dense)
        router_grad = np.asarray(grads["runs"][run]["layers"]["mlp"]["gate"][...])
        assert np.all(np.abs(router_grad).sum(axis=(-2,)) > 0), (
            "every expert's router column must get gradient"
        )


def test_gate_weights_of_forced_rows_are_the_current_softmax_at_the_forced_ids():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((1, 3, 6)).astype(np.float32)
    forced = np.array([[[4, 1], [-1, -1], [0, 5]]], np.int32)
    probs = _softmax(logits.astype(np.float64))
    for norm in (True, False):
        ids, weights, _ = route(jnp.asarray(logits), 2, norm, jnp.asarray(forced))
        ids, weights = np.asarray(ids), np.asarray(weights)
        native = np.argsort(-probs[0, 1])[:2]
        np.testing.assert_array_equal(ids[0], [[4, 1], native, [0, 5]])
        for t in range(3):
            picked = probs[0, t, ids[0, t]]
            expected = picked / picked.sum() if norm else picked  # raw softmax values without norm_topk_prob
            np.testing.assert_allclose(weights[0, t], expected, rtol=1e-6)


@pytest.mark.parametrize("impl", GROUPED_IMPLS)
def test_grouped_experts_match_a_per_expert_loop(impl):
    rng = np.random.default_rng(1)
    n, k, e, d, f = 10, 2, 6, 8, 5
    x = rng.standard_normal((n, d)).astype(np.float32)
    ids = np.stack([rng.choice(e, k, replace=False) for _ in range(n)]).astype(np.int32)
    w = rng.random((n, k)).astype(np.float32)
    wg, wu = (
        rng.standard_normal((e, d, f)).astype(np.float32),
        rng.standard_normal((e, d, f)).astype(np.float32),
    )
    wd = rng.standard_normal((e, f, d)).astype(np.float32)

    def expert(j, v):
        g = v @ wg[j]
        return ((g / (1 + np.exp(-g))) * (v @ wu[j])) @ wd[j]

    expected = np.stack([sum(w[i, s] * expert(ids[i, s], x[i]) for s in range(k)) for i in range(n)])
    got = grouped_experts(*(jnp.asarray(a) for a in (x, ids, w, wg, wu, wd)), impl=impl)
    # Kernel vs a float32 numpy loop summing in another order over d = 8, f = 5, k = 2 (blocks policy 1e-4).
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-4)
    # A device holding experts 3..5 only (expert parallelism) adds exactly their share.
    held = ids >= 3
    partial = np.stack(
        [
            sum((w[i, s] * expert(ids[i, s], x[i]) for s in range(k) if held[i, s]), np.zeros(d))
            for i in range(n)
        ]
    )
    got = grouped_experts(
        *(jnp.asarray(a) for a in (x, ids, w, wg[3:], wu[3:], wd[3:])), first_expert=3, impl=impl
    )
    np.testing.assert_allclose(np.asarray(got), partial, rtol=1e-4, atol=1e-4)


def _skewed_inputs(rng, n, k, e, held, d, f, busy):
    """Float32 tokens, ids, gates, the weights of the last `held` of `e` experts and an output cotangent,
    with half the tokens on expert `busy`, so one group spans several tiles and most experts get few rows.

    The cotangent is fixed so that two backward passes get the same one: a loss like sum(sin(y)) would hand
    each its own cos(y), which carries the forward's absolute rounding (|y| ~ 300 here) into the gradients
    and failed a comparison by 10x on one host (issue 32)."""
    x = jnp.asarray(rng.standard_normal((n, d)), jnp.float32)
    ids = np.stack([rng.choice(e, k, replace=False) for _ in range(n)])
    ids[: n // 2, 0] = busy
    ids[: n // 2, 1] = np.where(ids[: n // 2, 1] == busy, 0, ids[: n // 2, 1])
    w = jnp.asarray(rng.random((n, k)), jnp.float32)
    wg, wu = (jnp.asarray(rng.standard_normal((held, d, f)), jnp.float32) for _ in range(2))
    wd = jnp.asarray(rng.standard_normal((held, f, d)), jnp.float32)
    cotangent = jnp.asarray(rng.standard_normal((n, d)), jnp.float32)
    return x, jnp.asarray(ids, jnp.int32), w, wg, wu, wd, cotangent


@pytest.mark.parametrize("impl", ["tiles", "all_experts"])
@pytest.mark.parametrize(("n", "e"), [(1, 8), (37, 8), (300, 16)])  # decode, a skewed prefill, many tiles
def test_cpu_experts_match_ragged_dot_in_values_and_gradients(n, e, impl):
    k, d, f = 2, 16, 12
    x, ids, w, wg, wu, wd, cotangent = _skewed_inputs(np.random.default_rng(n), n, k, e, e, d, f, busy=1)

    def loss(impl):
        def fn(x, w, wg, wu, wd):
            y = grouped_experts(x, ids, w, wg, wu, wd, impl=impl)
            return jnp.sum(y * cotangent), y

        return jax.jit(jax.value_and_grad(fn, argnums=(0, 1, 2, 3, 4), has_aux=True))(x, w, wg, wu, wd)

    (_, y_ragged), g_ragged = loss("ragged_dot")
    (_, y_cpu), g_cpu = loss(impl)
    # The two only re-order float32 sums: a sum of m terms moves by at most ~m·u of its terms' magnitudes
    # (u = 2^-24), taken relative to each array's largest entry. Outputs sum over d, f and k terms; the
    # weight gradients also over up to n rows.
    u = 2.0**-24
    y_ragged = np.asarray(y_ragged)
    np.testing.assert_allclose(
        np.asarray(y_cpu), y_ragged, atol=(d + f + k) * u * np.abs(y_ragged).max(), rtol=0
    )
    for name, a, b in zip(("x", "weights", "w_gate", "w_up", "w_down"), g_cpu, g_ragged, strict=True):
        b = np.asarray(b)
        atol = (n + d + f + k) * u * np.abs(b).max()
        np.testing.assert_allclose(np.asarray(a), b, atol=atol, rtol=0, err_msg=name)


def _close_to(got, want, terms: int, name: str) -> None:
    """Equal up to re-ordered float32 sums of `terms` terms: ~terms·u of the array's largest entry."""
    want = np.asarray(want)
    atol = terms * 2.0**-24 * np.abs(want).max()
    np.testing.assert_allclose(np.asarray(got), want, atol=atol, rtol=0, err_msg=name)


@pytest.mark.parametrize("impl", GROUPED_IMPLS)
@pytest.mark.parametrize("first_expert", [0, 3])  # every expert here, or a device holding 3.. only
def test_chunked_experts_equal_one_pass_over_the_tokens_in_values_and_gradients(impl, first_expert):
    # 37 tokens in chunks of 8: four whole chunks and a last one of 5 padded to 8.
    n, k, e, d, f = 37, 2, 8, 16, 12
    rng = np.random.default_rng(5)
    x, ids, w, wg, wu, wd, cotangent = _skewed_inputs(rng, n, k, e, e - first_expert, d, f, busy=4)

    def run(chunk):
        def fn(x, w, wg, wu, wd):
            y = grouped_experts(x, ids, w, wg, wu, wd, first_expert, impl=impl, chunk=chunk)
            return jnp.sum(y * cotangent), y

        return jax.jit(jax.value_and_grad(fn, argnums=(0, 1, 2, 3, 4), has_aux=True))(x, w, wg, wu, wd)

    (_, whole), g_whole = run(n)
    (_, chunked), g_chunked = run(8)
    _close_to(chunked, whole, d + f + k, "y")
    for name, a, b in zip(("x", "weights", "w_gate", "w_up", "w_down"), g_chunked, g_whole, strict=True):
        _close_to(a, b, n + d + f + k, name)  # the weights' gradients also sum over the tokens


def test_a_block_in_chunks_equals_the_block_in_one_pass_with_replayed_routing_and_padding(
    monkeypatch, moe_config
):
    """Two rows of 29 tokens (odd, not a multiple of the chunk), the first half of each replayed to a
    drawn routing, the last 6 of row 1 padding: outputs, ids, router statistics and every gradient agree
    whether the block runs the 58 tokens at once or in chunks."""
    block = MoEBlock(moe_config, dtype=jnp.float32, rngs=nnx.Rngs(params=0))
    graphdef, state = nnx.split(block)
    rng = np.random.default_rng(11)
    b, t, d, e, k = 2, 29, moe_config.hidden_size, moe_config.num_experts, moe_config.num_experts_per_tok
    x = jnp.asarray(rng.standard_normal((b, t, d)), jnp.float32)
    forced = np.full((b, t, k), -1, np.int32)
    forced[:, : t // 2] = np.stack([rng.choice(e, k, replace=False) for _ in range(b * (t // 2))]).reshape(
        b, t // 2, k
    )
    mask = np.ones((b, t), bool)
    mask[1, -6:] = False
    forced, mask = jnp.asarray(forced), jnp.asarray(mask)
    cotangent = jnp.asarray(rng.standard_normal((b, t, d)), jnp.float32)

    def run():
        def fn(state, x):
            y, ids, stats = nnx.merge(graphdef, state)(x, forced, mask)
            return jnp.sum(y * cotangent) + jnp.sum(stats.prob_sums * jnp.arange(e)), (y, ids, stats)

        return jax.jit(jax.value_and_grad(fn, argnums=(0, 1), has_aux=True))(state, x)

    (_, (y1, ids1, stats1)), (g_state1, g_x1) = run()
    # Chunks of 10 tokens for these rows (20 pairs of D elements each): 58 tokens -> 6 chunks.
    monkeypatch.setattr(moe, "CHUNK_ELEMENTS", 10 * k * d)
    assert chunk_tokens(b * t, k, d) == 10
    (_, (y2, ids2, stats2)), (g_state2, g_x2) = run()
    np.testing.assert_array_equal(np.asarray(ids2), np.asarray(ids1))
    np.testing.assert_array_equal(np.asarray(ids2)[:, : t // 2], np.asarray(forced)[:, : t // 2])
    for a, c in zip(jax.tree.leaves(stats2), jax.tree.leaves(stats1), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))  # routed outside the chunks
    terms = b * t + d + moe_config.moe_intermediate_size + k
    _close_to(y2, y1, terms, "y")
    _close_to(g_x2, g_x1, terms, "x")
    for path, a in jax.tree_util.tree_leaves_with_path(g_state2):
        c = dict(jax.tree_util.tree_leaves_with_path(g_state1))[path]
        _close_to(a, c, terms, jax.tree_util.keystr(path))


def test_only_long_rows_are_chunked_and_a_bad_chunk_is_refused_naming_it():
    # Qwen3-30B-A3B (D 2048, top 8): one pass up to 8,192 tokens (the demo's rows, decode, a device's share
    # of a long row), then equal chunks of at most about 8,192.
    assert CHUNK_ELEMENTS == 8192 * 8 * 2048
    assert chunk_tokens(1, 8, 2048) == 1 and chunk_tokens(8192, 8, 2048) == 8192
    assert chunk_tokens(8193, 8, 2048) == 4097 and chunk_tokens(32768, 8, 2048) == 8192
    assert chunk_tokens(131072, 8, 2048) == 8192 and chunk_tokens(100_000, 8, 2048) == 7693
    # The tiny model of the demo and the long-context bench (D 64, top 2): never chunked up to 1M tokens.
    assert chunk_tokens(1 << 20, 2, 64) == 1 << 20
    with pytest.raises(ValueError, match="got -1, 8, 2048"):
        chunk_tokens(-1, 8, 2048)
    z = jnp.zeros((2, 4))
    with pytest.raises(ValueError, match="positive number of tokens, got 0"):
        grouped_experts(z, jnp.zeros((2, 1), jnp.int32), z[:, :1], *(jnp.zeros((2, 4, 4)),) * 3, chunk=0)


def test_grouped_impl_is_chosen_per_backend_and_size_and_checked():
    assert default_grouped_impl("cpu") == "tiles"
    assert default_grouped_impl("gpu") == default_grouped_impl("tpu") == "ragged_dot"
    # On CPU (32 experts, top 4), decode-sized batches run every expert; a [4, 256] forward the routed tiles.
    assert default_grouped_impl("cpu", 8, 32, 4) == default_grouped_impl("cpu", 32, 32, 4) == "all_experts"
    assert default_grouped_impl("cpu", 64, 32, 4) == default_grouped_impl("cpu", 1024, 32, 4) == "tiles"
    assert default_grouped_impl("gpu", 8, 32, 4) == "ragged_dot"
    # About pairs / (2 experts), a power of two in [8, 128]: 600 pairs over 16 experts -> 18.75 -> 32.
    assert tile_rows(1, 8) == 8 and tile_rows(4096, 8) == 128 and tile_rows(300 * 2, 16) == 32
    z = jnp.zeros((2, 4))
    with pytest.raises(ValueError, match="'dense'"):
        grouped_experts(z, jnp.zeros((2, 1), jnp.int32), z[:, :1], *(jnp.zeros((2, 4, 4)),) * 3, impl="dense")


def _hf_load_balancing_loss(layer_logits, top_k, attention_mask):
    """numpy transcription of transformers' load_balancing_loss_func (with attention_mask)."""
    num_layers, b, t, e = layer_logits.shape
    concatenated = layer_logits.reshape(num_layers * b * t, e)
    routing = _softmax(concatenated.astype(np.float64))
    selected = np.argsort(-routing, axis=-1, kind="stable")[:, :top_k]
    expert_mask = np.eye(e)[selected]  # [L*B*T, K, E]
    mask = np.broadcast_to(attention_mask[None, :, :, None, None], (num_layers, b, t, top_k, e)).reshape(
        -1, top_k, e
    )
    tokens_per_expert = (expert_mask * mask).sum(0) / mask.sum(0)
    router_mask = np.broadcast_to(attention_mask[None, :, :, None], (num_layers, b, t, e)).reshape(-1, e)
    router_prob = (routing * router_mask).sum(0) / router_mask.sum(0)
    return float(np.sum(tokens_per_expert * router_prob[None, :]) * e)


def test_aux_loss_matches_a_numpy_reimplementation_of_hf_formula():
    rng = np.random.default_rng(2)
    num_layers, b, t, e, k = 3, 2, 7, 8, 2
    layer_logits = (3 * rng.standard_normal((num_layers, b, t, e))).astype(np.float32)
    mask = np.ones((b, t), np.int32)
    mask[1, 4:] = 0  # padding is excluded from both means
    total = None
    for layer in range(num_layers):
        ids, _, probs = route(jnp.asarray(layer_logits[layer]), k, True, None)
        stats = router_stats(ids, probs, jnp.asarray(mask > 0))
        total = stats if total is None else total + stats
    ours = load_balancing_loss(total, jnp.sum(jnp.asarray(mask, jnp.float32)), num_layers, e)
    assert float(ours) == pytest.approx(_hf_load_balancing_loss(layer_logits, k, mask), rel=1e-5)


def test_padding_tokens_do_not_enter_the_aux_loss(moe_policy, jit_forward, tokens):
    forward = jit_forward(moe_policy)
    ids = tokens(2, 10, seed=5)
    segments = np.ones((2, 10), np.int32)
    segments[1, 6:] = 0
    other = ids.copy()
    other[1, 6:] = (other[1, 6:] + 17) % 256
    a = forward(ids, segment_ids=segments)
    b = forward(other, segment_ids=segments)
    # Padding tokens are masked out of the router statistics: the same sums of the same values, bitwise.
    assert float(a.aux_loss) == pytest.approx(float(b.aux_loss), abs=1e-7)
    assert float(a.aux_loss) != pytest.approx(float(forward(other).aux_loss), abs=1e-4)


@pytest.mark.parametrize(
    "edit, error, message",
    [
        (lambda f: f[:, :, :, :1], ValueError, r"shape \(2, 2, 4, 1\), expected \(2, 2, 4, 2\)"),
        (
            lambda f: f.at[1, 0, 2, 1].set(8),
            ValueError,
            r"forced_experts\[1, 0, 2, 1\] = 8 is outside \[-1, num_experts=8\)",
        ),
        (lambda f: f.at[0, 1, 3, 0].set(-1), ValueError, r"forced_experts\[0, 1, 3\] = .* mixes -1"),
        (
            lambda f: f.at[0, 0, 0].set(jnp.array([5, 5])),
            ValueError,
            r"forced_experts\[0, 0, 0\] = \[5, 5\] names an expert twice",
        ),
        (lambda f: f.astype(jnp.float32), TypeError, "integer array"),
    ],
)
def test_bad_forced_experts_raise_naming_shape_value_or_location(moe_policy, edit, error, message):
    forced = jnp.tile(jnp.array([0, 1], jnp.int32), (2, 2, 4, 1))
    with pytest.raises(error, match=message):
        moe_policy(jnp.zeros((2, 4), jnp.int32), forced_experts=edit(forced))


def test_dense_model_refuses_forced_experts(dense_policy):
    with pytest.raises(ValueError, match="has no MoE layers"):
        dense_policy(jnp.zeros((1, 4), jnp.int32), forced_experts=jnp.zeros((1, 1, 4, 2), jnp.int32))


def test_forced_experts_given_as_nested_lists_are_checked_like_arrays(moe_policy):
    forced = np.tile(np.array([0, 1]), (2, 2, 4, 1))
    forced[1, 1, 3] = [2, 9]
    with pytest.raises(
        ValueError, match=r"forced_experts\[1, 1, 3, 1\] = 9 is outside \[-1, num_experts=8\)"
    ):
        moe_policy(jnp.zeros((2, 4), jnp.int32), forced_experts=forced.tolist())
