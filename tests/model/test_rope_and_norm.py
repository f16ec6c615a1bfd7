"""RMSNorm, RoPE (plain, linear, YaRN) and the parameter helper against hand computations."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from legorl_jax.model import RopeScaling
from legorl_jax.model.layers import RMSNorm, apply_rope, normal_init, param, rope_frequencies


def test_rmsnorm_matches_numpy():
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    norm = RMSNorm(8, 1e-6, "embed", dtype=jnp.float32, rngs=nnx.Rngs(0))
    norm.weight[...] = jnp.arange(1, 9, dtype=jnp.float32)
    expected = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-6) * np.arange(1, 9)
    np.testing.assert_allclose(np.asarray(norm(jnp.asarray(x))), expected, rtol=1e-5, atol=1e-5)


def test_plain_rope_frequencies_are_theta_powers():
    inv_freq, factor = rope_frequencies(8, 10000.0, None, 128)
    np.testing.assert_allclose(inv_freq, 10000.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-6)
    assert factor == 1.0


def test_yarn_matches_a_hand_computation_of_hf_formula():
    # head_dim 16, theta 10000, factor 4, 128 original positions (the qwen3_moe_yarn_mixed fixture's rope).
    dim, base, factor, original = 16, 10000.0, 4.0, 128
    inv_freq, attention_factor = rope_frequencies(
        dim, base, RopeScaling("yarn", factor, original_max_position_embeddings=original), 512
    )
    # Correction range: dim * ln(orig / (rotations * 2 pi)) / (2 ln base), floored/ceiled, clipped to [0,
    # dim-1].
    low = math.floor(
        dim * math.log(original / (32 * 2 * math.pi)) / (2 * math.log(base))
    )  # floor(-0.39) = -1
    high = math.ceil(dim * math.log(original / (1 * 2 * math.pi)) / (2 * math.log(base)))  # ceil(2.62) = 3
    low, high = max(low, 0), min(high, dim - 1)
    assert (low, high) == (0, 3)  # pair 0 keeps its frequency, 1-2 blend, 3.. are divided by factor
    expected = []
    for i in range(dim // 2):
        pos_freq = base ** (2 * i / dim)
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extrapolation = 1.0 - ramp
        expected.append((1 / (factor * pos_freq)) * (1 - extrapolation) + (1 / pos_freq) * extrapolation)
    np.testing.assert_allclose(inv_freq, np.asarray(expected), rtol=2e-6)
    # Attention factor 0.1 ln(factor) + 1: cos and sin are scaled by it.
    assert attention_factor == pytest.approx(0.1 * math.log(4.0) + 1.0, abs=0)


def test_yarn_attention_factor_uses_mscale_ratio_and_explicit_values():
    scaled = RopeScaling("yarn", 4.0, 128, mscale=2.0, mscale_all_dim=1.0)
    _, factor = rope_frequencies(16, 10000.0, scaled, 512)
    assert factor == pytest.approx((0.2 * math.log(4) + 1) / (0.1 * math.log(4) + 1))
    _, explicit = rope_frequencies(16, 10000.0, RopeScaling("yarn", 4.0, 128, attention_factor=0.5), 512)
    assert explicit == 0.5


def test_yarn_without_truncation_keeps_fractional_ramp_bounds():
    truncated, _ = rope_frequencies(16, 10000.0, RopeScaling("yarn", 4.0, 128), 512)
    exact, _ = rope_frequencies(16, 10000.0, RopeScaling("yarn", 4.0, 128, truncate=False), 512)
    assert not np.array_equal(truncated, exact)


def test_linear_rope_divides_frequencies_by_factor():
    plain, _ = rope_frequencies(8, 10000.0, None, 128)
    linear, _ = rope_frequencies(8, 10000.0, RopeScaling("linear", 2.0), 128)
    np.testing.assert_allclose(linear, plain / 2, rtol=1e-7)


def test_rope_scores_depend_only_on_relative_position():
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((1, 1, 1, 8)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, 1, 1, 8)), jnp.float32)
    inv_freq, _ = rope_frequencies(8, 10000.0, None, 128)

    def score(pq, pk):
        rq = apply_rope(q, jnp.array([[pq]]), inv_freq, 1.0)
        rk = apply_rope(k, jnp.array([[pk]]), inv_freq, 1.0)
        return float(jnp.sum(rq * rk))

    assert score(7, 3) == pytest.approx(score(14, 10), abs=1e-5)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-3)
    assert score(0, 0) == pytest.approx(float(jnp.sum(q * k)), abs=1e-6)


def test_param_attaches_logical_axes_and_rejects_unknown_ones():
    p = param(nnx.Rngs(0), normal_init, (4, 2), ("embed", "mlp"), jnp.float32)
    assert p.get_metadata()["out_sharding"] == ("embed", "mlp")
    with pytest.raises(ValueError, match="'hidden' is not in the vocabulary"):
        param(nnx.Rngs(0), normal_init, (4,), ("hidden",), jnp.float32)
    with pytest.raises(ValueError, match=r"one logical axis per dimension"):
        param(nnx.Rngs(0), normal_init, (4, 2), ("embed",), jnp.float32)
