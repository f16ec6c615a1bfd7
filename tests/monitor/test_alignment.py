"""Alignment figures against hand-computed values."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from legorl_jax.monitor.alignment import logprob_alignment, routing_alignment


def test_identical_logprobs_are_perfectly_aligned():
    lp = jnp.asarray([[-0.1, -2.0, -0.7, -5.0]])
    out = {k: float(v) for k, v in logprob_alignment(lp, lp, jnp.ones_like(lp)).items()}
    assert out["align/prob_pearson"] == pytest.approx(1.0, abs=1e-6)
    assert out["align/k1"] == 0.0 and out["align/k3"] == 0.0 and out["align/max_abs_logprob_diff"] == 0.0
    assert out["align/is_ess"] == pytest.approx(1.0)


def test_kl_estimates_diffs_and_ess_follow_their_formulas():
    train = jnp.asarray([[-1.0, -1.0, -3.0]])
    rollout = jnp.asarray([[-1.5, -0.5, 0.0]])
    mask = jnp.asarray([[1.0, 1.0, 0.0]])  # the third token is not sampled: it must not count
    out = {k: float(v) for k, v in logprob_alignment(train, rollout, mask).items()}
    # Δ = train - rollout = (0.5, -0.5); k1 = mean(rollout - train) = 0; k3 = mean(e^Δ - Δ - 1).
    assert out["align/k1"] == pytest.approx(0.0, abs=1e-7)
    assert out["align/k3"] == pytest.approx((math.exp(0.5) - 1.5 + math.exp(-0.5) - 0.5) / 2, abs=1e-6)
    assert out["align/max_abs_logprob_diff"] == pytest.approx(0.5)
    w = np.asarray([math.exp(0.5), math.exp(-0.5)])
    assert out["align/is_ess"] == pytest.approx(w.sum() ** 2 / (2 * (w**2).sum()), abs=1e-6)
    p_diff = [abs(math.exp(-1.0) - math.exp(-1.5)), abs(math.exp(-1.0) - math.exp(-0.5))]
    assert out["align/prob_diff_mean"] == pytest.approx(sum(p_diff) / 2, abs=1e-6)
    assert out["align/prob_diff_max"] == pytest.approx(max(p_diff), abs=1e-6)
    # Two points always correlate ±1: p_train is constant here, so Pearson is undefined (NaN), not 0 or 1.
    assert math.isnan(out["align/prob_pearson"])


def test_pearson_matches_numpy_on_random_probabilities():
    rng = np.random.default_rng(0)
    train = np.log(rng.uniform(0.01, 1.0, (3, 50)))
    rollout = train + rng.normal(0, 0.3, train.shape)
    mask = (rng.uniform(size=train.shape) > 0.3).astype(np.float32)
    got = float(
        logprob_alignment(jnp.asarray(train), jnp.asarray(rollout), jnp.asarray(mask))["align/prob_pearson"]
    )
    sel = mask > 0
    assert got == pytest.approx(np.corrcoef(np.exp(train[sel]), np.exp(rollout[sel]))[0, 1], abs=1e-5)


def test_routing_coverage_and_agreement_count_recorded_pairs_only():
    # L = 2 layers, one row of 3 positions, K = 2.
    recorded = jnp.asarray(
        [
            [[[0, 1], [2, 3], [-1, -1]]],
            [[[1, 0], [-1, -1], [-1, -1]]],
        ]
    )
    native = jnp.asarray(
        [
            [[[1, 0], [2, 0], [3, 1]]],  # {0,1} vs {0,1}: 1; {2,3} vs {2,0}: 1/2
            [[[1, 3], [0, 1], [0, 1]]],  # {1,0} vs {1,3}: 1/2
        ]
    )
    mask = jnp.asarray([[1.0, 1.0, 1.0]])
    out = {k: float(v) for k, v in routing_alignment(recorded, native, mask, input_mask=mask).items()}
    # 3 of 6 (token, layer) pairs were recorded; agreement averages over those 3 only. Averaging over all
    # six pairs would give 2/6.
    assert out["align/routing_coverage"] == pytest.approx(0.5)
    assert out["align/routing_agreement"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    masked = routing_alignment(recorded, native, jnp.asarray([[1.0, 0.0, 0.0]]))
    assert float(masked["align/routing_coverage"]) == pytest.approx(1.0)
    assert float(masked["align/routing_agreement"]) == pytest.approx(0.75)
