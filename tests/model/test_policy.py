"""The policy forward: packing, segments, the scan / remat flags, precision, jitting, input checks."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from legorl_jax.model import ArchConfig, ModelOutput, init_policy
from legorl_jax.model.policy import positions_from_segments


def _packed(a, b, width):
    """Rows [a | b | padding] with segment ids 1, 2, 0 and positions restarting per segment."""
    row = np.zeros(width, np.int32)
    row[: len(a)], row[len(a) : len(a) + len(b)] = a, b
    seg = np.zeros(width, np.int32)
    seg[: len(a)], seg[len(a) : len(a) + len(b)] = 1, 2
    return row[None], seg[None]


def test_attention_never_crosses_segments(moe_policy, jit_forward, tokens):
    forward = jit_forward(moe_policy)
    a, b = tokens(1, 5, seed=1)[0], tokens(1, 6, seed=2)[0]
    row, seg = _packed(a, b, 12)
    base = forward(row, segment_ids=seg)
    changed_b = row.copy()
    changed_b[0, 5:11] = (changed_b[0, 5:11] + 7) % 256
    out = forward(changed_b, segment_ids=seg)
    # Masked keys get softmax weight exactly 0: the other segment adds exact zeros (a leak: > 1e-3 below).
    np.testing.assert_allclose(
        np.asarray(out.logits[0, :5]), np.asarray(base.logits[0, :5]), atol=1e-6, rtol=0
    )
    # The later segment must not see the earlier one either (causality alone would let it).
    changed_a = row.copy()
    changed_a[0, :5] = (changed_a[0, :5] + 7) % 256
    out = forward(changed_a, segment_ids=seg)
    np.testing.assert_allclose(
        np.asarray(out.logits[0, 5:11]), np.asarray(base.logits[0, 5:11]), atol=1e-6, rtol=0
    )
    assert float(jnp.max(jnp.abs(out.logits[0, :5] - base.logits[0, :5]))) > 1e-3


def test_packed_rows_equal_unpacked_sequences(moe_policy, jit_forward, tokens):
    forward = jit_forward(moe_policy)
    a, b = tokens(1, 5, seed=1)[0], tokens(1, 6, seed=2)[0]
    row, seg = _packed(a, b, 12)
    packed = forward(row, segment_ids=seg)
    alone = np.zeros((2, 12), np.int32)
    alone[0, :5], alone[1, :6] = a, b
    single = forward(alone)
    # Order-1 logits whose sums packing re-orders (another row layout): float32 noise ~1e-7.
    np.testing.assert_allclose(
        np.asarray(packed.logits[0, :5]), np.asarray(single.logits[0, :5]), atol=1e-5, rtol=0
    )
    np.testing.assert_allclose(
        np.asarray(packed.logits[0, 5:11]), np.asarray(single.logits[1, :6]), atol=1e-5, rtol=0
    )
    routed_packed, routed_single = np.asarray(packed.routed_experts), np.asarray(single.routed_experts)
    np.testing.assert_array_equal(np.sort(routed_packed[:, 0, :5], -1), np.sort(routed_single[:, 0, :5], -1))
    np.testing.assert_array_equal(
        np.sort(routed_packed[:, 0, 5:11], -1), np.sort(routed_single[:, 1, :6], -1)
    )


def test_default_positions_restart_at_each_segment():
    seg = jnp.array([[1, 1, 1, 2, 2, 0, 0], [3, 3, 3, 3, 3, 3, 3]])
    np.testing.assert_array_equal(
        np.asarray(positions_from_segments(seg)), [[0, 1, 2, 0, 1, 0, 1], list(range(7))]
    )


def test_scan_on_and_off_give_identical_outputs(moe_policy, moe_config, jit_forward, tokens):
    unrolled = init_policy(moe_config, seed=1, init_std=0.2, scan_layers=False)
    ids = tokens(2, 12, seed=3)
    a, b = jit_forward(moe_policy)(ids), jit_forward(unrolled)(ids)
    np.testing.assert_array_equal(np.asarray(a.logits), np.asarray(b.logits))
    np.testing.assert_array_equal(np.asarray(a.routed_experts), np.asarray(b.routed_experts))
    assert float(a.aux_loss) == float(b.aux_loss)


def test_remat_changes_neither_outputs_nor_gradients(dense_config, tokens):
    ids = jnp.asarray(tokens(2, 8, seed=4))

    def loss_and_grads(remat):
        policy = init_policy(dense_config, seed=2, init_std=0.2, remat=remat)
        graphdef, params = nnx.split(policy)
        fn = jax.jit(jax.value_and_grad(lambda p: jnp.mean(nnx.merge(graphdef, p)(ids).logits ** 2)))
        return fn(params)

    (plain_loss, plain_grads), (remat_loss, remat_grads) = loss_and_grads(False), loss_and_grads(True)
    assert float(plain_loss) == float(remat_loss)
    # Recomputation re-orders float32 sums in the backward, not bitwise: a sum of m terms moves by at most
    # ~m·u of its terms' magnitudes (u = 2^-24), relative to each leaf's largest gradient; m = the B·T token
    # positions plus the longest contraction (vocab) once per layer and in the head.
    m = ids.size + (dense_config.num_hidden_layers + 1) * dense_config.vocab_size
    for g1, g2 in zip(jax.tree.leaves(plain_grads), jax.tree.leaves(remat_grads), strict=True):
        g1 = np.asarray(g1)
        np.testing.assert_allclose(g1, np.asarray(g2), atol=m * 2.0**-24 * np.abs(g1).max(), rtol=0)


@functools.cache
def _remat_loss_and_grads(config, remat, scan):
    """Loss and gradients of a packed row of two segments through the mixed MoE / dense stack: token log-probs
    (the trainer's path) and the aux loss, under one remat policy (cached: the no-remat run is shared)."""
    rng = np.random.default_rng(5)
    ids = jnp.asarray(rng.integers(0, config.vocab_size, (2, 12)), jnp.int32)
    targets = jnp.roll(ids, -1, axis=1)
    segments = jnp.asarray(np.repeat([[1] * 7 + [2] * 4 + [0]], 2, axis=0), jnp.int32)
    policy = init_policy(config, seed=1, init_std=0.2, scan_layers=scan, remat=remat)
    graphdef, params = nnx.split(policy)

    def loss(p):
        out = nnx.merge(graphdef, p).token_logprobs(ids, targets, segment_ids=segments, details=True)
        return jnp.mean(out.logprobs * (segments > 0)) + 0.1 * out.output.aux_loss

    return jax.jit(jax.value_and_grad(loss))(params), ids.size


@pytest.mark.parametrize(
    "remat, scan",
    [
        ("full", True),
        pytest.param("minimal", True, marks=pytest.mark.slow),  # ~9 s each
        ("save_dot_except_mlp", True),
        pytest.param("save_dot_except_mlp", False, marks=pytest.mark.slow),
    ],
)
def test_every_remat_policy_gives_the_gradients_of_no_remat(moe_config, remat, scan):
    (plain_loss, plain_grads), tokens_in = _remat_loss_and_grads(moe_config, "none", scan)
    (remat_loss, remat_grads), _ = _remat_loss_and_grads(moe_config, remat, scan)
    assert float(plain_loss) == float(remat_loss)
    # As above: recomputation may re-order float32 sums in the backward, by at most ~m·u of a leaf's
    # largest gradient (m: token positions plus the vocab once per layer and in the head).
    m = tokens_in + (moe_config.num_hidden_layers + 1) * moe_config.vocab_size
    leaves = jax.tree.leaves_with_path(plain_grads)
    for (path, g1), g2 in zip(leaves, jax.tree.leaves(remat_grads), strict=True):
        g1 = np.asarray(g1)
        assert np.abs(g1).max() > 0, jax.tree_util.keystr(path)  # every parameter gets a gradient
        np.testing.assert_allclose(
            g1,
            np.asarray(g2),
            atol=m * 2.0**-24 * np.abs(g1).max(),
            rtol=0,
            err_msg=jax.tree_util.keystr(path),
        )


def test_an_unknown_remat_policy_is_refused_by_name(moe_config):
    with pytest.raises(ValueError, match="remat must be one of .* got 'everything'"):
        init_policy(moe_config, remat="everything")


def test_bfloat16_compute_with_float32_params_keeps_logits_float32(
    moe_policy, moe_config, jit_forward, tokens
):
    ids = tokens(2, 12, seed=3)
    mixed = init_policy(moe_config, seed=1, init_std=0.2, compute_dtype="bfloat16")  # moe_policy's weights
    out32 = jit_forward(moe_policy)(ids)
    # bf16 activations can flip a near-tied top-k choice, which changes a token's output discretely;
    # replaying the float32 routing isolates the precision difference (exactly what R3 is for).
    out16 = jit_forward(mixed)(ids, forced_experts=out32.routed_experts)
    assert out16.logits.dtype == jnp.float32 and out16.hidden.dtype == jnp.bfloat16
    assert nnx.state(mixed, nnx.Param)["embed_tokens"][...].dtype == jnp.float32
    # bf16 tolerance 2e-2 on the output distribution (logits of magnitude ~5 after three bf16 layers
    # carry absolute errors ~0.1, so an absolute logit bound would only restate the dynamic range).
    p32, p16 = jax.nn.softmax(out32.logits, axis=-1), jax.nn.softmax(out16.logits, axis=-1)
    assert float(jnp.max(jnp.abs(p16 - p32))) <= 2e-2


def test_tied_policy_uses_the_embedding_as_lm_head(moe_raw):
    tied = init_policy(ArchConfig.from_hf_dict(moe_raw | {"tie_word_embeddings": True}), init_std=0.2)
    assert not hasattr(tied, "lm_head")
    np.testing.assert_array_equal(np.asarray(tied.lm_head_weight()), np.asarray(tied.embed_tokens[...]).T)


def test_policy_jits_as_pure_function_of_state_and_nnx_update_swaps_weights(moe_config, tokens):
    ids = jnp.asarray(tokens(1, 6, seed=6))
    policy, other = init_policy(moe_config, seed=1), init_policy(moe_config, seed=7)
    graphdef, state = nnx.split(policy)
    traces = []

    @jax.jit
    def forward(state, ids):
        traces.append(1)
        return nnx.merge(graphdef, state)(ids)

    first = forward(state, ids)
    assert isinstance(first, ModelOutput)
    nnx.update(policy, nnx.state(other))
    swapped = forward(nnx.state(policy), ids)
    assert len(traces) == 1, "swapping weights must not retrace"
    np.testing.assert_array_equal(
        np.asarray(swapped.logits), np.asarray(forward(nnx.state(other), ids).logits)
    )
    assert float(jnp.max(jnp.abs(swapped.logits - first.logits))) > 1e-3


def test_dense_model_returns_no_routing_and_zero_aux_loss(dense_policy, jit_forward, tokens):
    out = jit_forward(dense_policy)(tokens(1, 6, seed=7))
    assert out.routed_experts is None and float(out.aux_loss) == 0.0
    assert out.logits.shape == (1, 6, 256) and out.hidden.shape == (1, 6, 32)
    assert dense_policy(tokens(1, 6, seed=7), compute_logits=False).logits is None


def test_token_logprobs_equal_log_softmax_of_logits_at_temperature(moe_policy, jit_forward, tokens):
    ids = tokens(2, 12, seed=3)
    targets = np.roll(ids, -1, axis=1)
    segments = np.ones_like(ids)
    segments[1, 9:] = 0
    logits = jit_forward(moe_policy)(ids, segment_ids=segments).logits
    graphdef, state = nnx.split(moe_policy)
    token_logprobs = jax.jit(
        lambda state, ids, targets, segments: nnx.merge(graphdef, state).token_logprobs(
            ids, targets, segment_ids=segments, temperature=0.7
        )
    )
    got = token_logprobs(state, ids, targets, segments)
    expected = jnp.take_along_axis(
        jax.nn.log_softmax(logits / 0.7, axis=-1), jnp.asarray(targets)[..., None], -1
    )[..., 0]
    # Fused path vs log_softmax of the same logits: a re-ordered 256-way log-sum-exp (fp32 simple-op 1e-5).
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match=r"targets has shape \(2, 6\), input_ids has \(2, 12\)"):
        moe_policy.token_logprobs(ids, targets[:, :6])


def test_token_logprobs_details_carry_the_tempered_entropy_and_the_replayed_forwards_output(
    moe_policy, jit_forward, tokens
):
    """The trainer's path: a forward with routing forced away from the native one, log-probs, entropy and the
    same forward's routing and aux loss. Forced routing that were dropped on the way would give the native
    logits and routing here; an entropy at temperature 1 would differ by up to 0.9 nats."""
    ids = tokens(2, 12, seed=4)
    targets = np.roll(ids, -1, axis=1)
    native = jit_forward(moe_policy)(ids).routed_experts
    forced = (native + 1) % moe_policy.config.num_experts
    expected_out = jit_forward(moe_policy)(ids, forced_experts=forced)
    graphdef, state = nnx.split(moe_policy)
    got = jax.jit(
        lambda state, ids, targets, forced: nnx.merge(graphdef, state).token_logprobs(
            ids, targets, forced_experts=forced, temperature=0.7, impl="xla", details=True
        )
    )(state, ids, targets, forced)
    log_p = jax.nn.log_softmax(expected_out.logits / 0.7, axis=-1)
    expected_lp = jnp.take_along_axis(log_p, jnp.asarray(targets)[..., None], -1)[..., 0]
    # As above: one re-ordered log-sum-exp per value (fp32 simple-op 1e-5).
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(expected_lp), atol=1e-5, rtol=0)
    entropy = -(jnp.exp(log_p) * log_p).sum(-1)
    np.testing.assert_allclose(np.asarray(got.entropy), np.asarray(entropy), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(np.asarray(got.output.routed_experts), np.asarray(forced))
    assert got.output.logits is None
    np.testing.assert_allclose(float(got.output.aux_loss), float(expected_out.aux_loss), atol=1e-5, rtol=0)
    assert not np.array_equal(np.asarray(native), np.asarray(forced))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            dict(input_ids=np.full((1, 4), 256)),
            ValueError,
            r"input_ids\[0, 0\] = 256 is outside \[0, vocab_size=256\)",
        ),
        (
            dict(input_ids=np.zeros((4,), np.int32)),
            ValueError,
            r"input_ids must be \[B, T\], got shape \(4,\)",
        ),
        (dict(input_ids=np.zeros((1, 4), np.float32)), TypeError, "input_ids must be an integer array"),
        (
            dict(positions=np.zeros((1, 3), np.int32)),
            ValueError,
            r"positions has shape \(1, 3\), input_ids has \(1, 4\)",
        ),
        (dict(segment_ids=np.zeros((2, 4), np.int32)), ValueError, r"segment_ids has shape \(2, 4\)"),
    ],
)
def test_bad_inputs_raise_naming_field_and_value(moe_policy, kwargs, error, message):
    kwargs = {"input_ids": np.zeros((1, 4), np.int32)} | kwargs
    with pytest.raises(error, match=message):
        moe_policy(kwargs.pop("input_ids"), **kwargs)
