"""Alignment figures against hand-computed values."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from legorl_jax.monitor.alignment import LOGPROB_KEYS, logprob_alignment, routing_alignment, version_alignment
from legorl_jax.monitor.rollout_metrics import alerts


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


def _mixed_versions_batch():
    """One row of 8 sampled tokens: 4 of version 5 the trainer reproduces exactly, 3 of version 4 whose
    behaviour log-probs are another policy's, one of unknown version (-1); a ninth position is not sampled."""
    rng = np.random.default_rng(1)
    train = np.log(rng.uniform(0.05, 1.0, (1, 9)))
    rollout = train.copy()
    rollout[0, 4:7] = np.log(rng.uniform(0.05, 1.0, 3))  # the old policy's numbers
    rollout[0, 7] -= 3.0  # unknown version: counted nowhere
    versions = np.asarray([[5, 5, 5, 5, 4, 4, 4, -1, 5]], np.int32)
    mask = np.asarray([[1, 1, 1, 1, 1, 1, 1, 1, 0]], np.float32)
    return train, rollout, mask, versions


def test_version_alignment_judges_the_trainers_own_version_and_reports_older_tokens_as_offpolicy():
    train, rollout, mask, versions = _mixed_versions_batch()
    before = {"align/prob_pearson": 0.5, "align/k1": 9.0, "align/routing_coverage": 1.0, "train/loss": 2.0}
    out = version_alignment(before, train, rollout, mask, versions, trainer_version=5)
    # The same-version tokens agree exactly: a healthy gate, whatever the older tokens do.
    assert out["align/prob_pearson"] == pytest.approx(1.0, abs=1e-6)
    assert out["align/k1"] == 0.0 and out["align/max_abs_logprob_diff"] == 0.0
    assert out["align/same_version_tokens"] == 4 and out["offpolicy/cross_version_tokens"] == 3
    # The older tokens' figures are those of logprob_alignment over exactly them.
    cross = np.zeros_like(mask)
    cross[0, 4:7] = 1
    expected = logprob_alignment(jnp.asarray(train), jnp.asarray(rollout), jnp.asarray(cross))
    for key, value in expected.items():
        assert out[f"offpolicy/{key.removeprefix('align/')}_cross"] == pytest.approx(float(value), abs=1e-6)
    both = np.asarray([[1, 1, 1, 1, 1, 1, 1, 0, 0]], np.float32)
    whole = float(
        logprob_alignment(jnp.asarray(train), jnp.asarray(rollout), jnp.asarray(both))["align/prob_pearson"]
    )
    assert out["offpolicy/prob_pearson_all"] == pytest.approx(whole, abs=1e-6) and whole < 0.99
    # Figures a version does not change pass through untouched; the input is not modified.
    assert out["align/routing_coverage"] == 1.0 and out["train/loss"] == 2.0 and before["align/k1"] == 9.0


def test_version_alignment_without_tokens_of_the_trainers_version_judges_nothing_and_alerts_nothing():
    train, rollout, mask, versions = _mixed_versions_batch()
    out = version_alignment({"align/prob_pearson": 0.9}, train, rollout, mask, versions, trainer_version=7)
    assert not any(k in out for k in LOGPROB_KEYS) and out["align/same_version_tokens"] == 0
    assert out["offpolicy/cross_version_tokens"] == 7
    assert alerts(out) == []
    # A real misalignment among the trainer's own tokens still alerts.
    broken = rollout.copy()
    broken[0, :4] = np.log(np.asarray([0.9, 0.1, 0.8, 0.2]))
    train[0, :4] = np.log(np.asarray([0.1, 0.9, 0.2, 0.8]))
    sick = version_alignment({}, train, broken, mask, versions, trainer_version=5)
    assert any("replay or numerics broken" in a for a in alerts(sick))


def test_version_alignment_without_known_versions_keeps_the_figures_and_names_bad_input():
    train, rollout, mask, _ = _mixed_versions_batch()
    unknown = np.full(mask.shape, -1, np.int32)
    assert version_alignment({"align/prob_pearson": 0.97}, train, rollout, mask, unknown, 3) == {
        "align/prob_pearson": 0.97
    }
    _, _, _, versions = _mixed_versions_batch()
    with pytest.raises(ValueError, match="a sampled token has version 5, newer than the trainer's 4"):
        version_alignment({}, train, rollout, mask, versions, trainer_version=4)
    with pytest.raises(ValueError, match="trainer_version must be an int >= 0 or None, got -1"):
        version_alignment({}, train, rollout, mask, versions, trainer_version=-1)
    with pytest.raises(ValueError, match=r"token_versions has shape \(1, 3\), the mask \(1, 9\)"):
        version_alignment({}, train, rollout, mask, versions[:, :3], trainer_version=5)


def test_tokens_sampled_over_stale_kv_leave_the_gate_for_offpolicy_stale_kv_figures():
    train, rollout, mask, versions = _mixed_versions_batch()
    # Two of the trainer's version's tokens were sampled over old K/V (their log-probs are a mix of weights
    # no recompute reproduces); one older token too, which stays with the older ones.
    rollout[0, 2:4] = np.log(np.asarray([0.9, 0.05]))
    train[0, 2:4] = np.log(np.asarray([0.05, 0.9]))
    stale = np.asarray([[0, 0, 1, 1, 0, 0, 1, 0, 1]], np.int8)  # position 8 is not sampled: ignored
    out = version_alignment({"align/prob_pearson": 0.5}, train, rollout, mask, versions, 5, stale_kv=stale)
    # The gate judges the two fresh tokens of version 5, which agree exactly.
    assert out["align/prob_pearson"] == pytest.approx(1.0, abs=1e-6) and out["align/k1"] == 0.0
    assert out["align/same_version_tokens"] == 4 and out["offpolicy/stale_kv_tokens"] == 2
    assert out["offpolicy/cross_version_tokens"] == 3  # position 6 counted once, as older, stale or not
    for suffix, cols in (("stale_kv", [2, 3]), ("cross", [4, 5, 6])):
        select = np.zeros_like(mask)
        select[0, cols] = 1
        expected = logprob_alignment(jnp.asarray(train), jnp.asarray(rollout), jnp.asarray(select))
        for key, value in expected.items():
            name = f"offpolicy/{key.removeprefix('align/')}_{suffix}"
            assert out[name] == pytest.approx(float(value), abs=1e-6), name
    assert out["offpolicy/max_abs_logprob_diff_stale_kv"] > 2.0 and alerts(out) == []
    # Counted in the gate instead, the same tokens would have read as broken replay.
    mixed = version_alignment({}, train, rollout, mask, versions, 5)
    assert any("replay or numerics broken" in a for a in alerts(mixed))


def test_stale_kv_tokens_leave_the_gate_without_versions_and_only_all_fresh_batches_pass_through():
    train, rollout, mask, _ = _mixed_versions_batch()
    stale = np.zeros(mask.shape, np.int8)
    stale[0, 5:] = 1  # the sync loop's batch: no trainer version, the last sampled tokens stale
    out = version_alignment({"align/prob_pearson": 0.97}, train, rollout, mask, None, None, stale_kv=stale)
    fresh = np.zeros_like(mask)
    fresh[0, :5] = 1
    expected = logprob_alignment(jnp.asarray(train), jnp.asarray(rollout), jnp.asarray(fresh))
    assert out["align/prob_pearson"] == pytest.approx(float(expected["align/prob_pearson"]), abs=1e-6)
    assert out["align/same_version_tokens"] == 8 and out["offpolicy/stale_kv_tokens"] == 3
    assert out["offpolicy/cross_version_tokens"] == 0 and "offpolicy/k1_cross" not in out
    zeros = np.zeros(mask.shape, np.int8)
    before = {"align/prob_pearson": 0.97}
    assert version_alignment(before, train, rollout, mask, None, None, stale_kv=zeros) == before
    with pytest.raises(ValueError, match=r"stale_kv has shape \(1, 3\), the mask \(1, 9\)"):
        version_alignment({}, train, rollout, mask, None, None, stale_kv=stale[:, :3])
