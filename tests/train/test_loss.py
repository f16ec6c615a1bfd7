"""Losses, aggregation and importance sampling against hand-computed values.

Arrays are one packed row `[1, T]` (or two) so the per-segment logic is exercised; every expected number
is written out from the formula, with what a bug would give instead.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from legorl_jax.config import AlgoConfig
from legorl_jax.train.loss import (
    aggregate,
    importance_stats,
    k3_kl,
    loss_norm,
    policy_loss,
    rollout_correction,
)


def row(*values):
    return jnp.asarray([values], jnp.float32)


def seg(*values):
    return jnp.asarray([values], jnp.int32)


def grad_wrt_logprobs(lp, **kwargs):
    return jax.grad(lambda x: policy_loss(x, **kwargs)[0])(lp)


def test_gspo_uses_the_sequence_mean_ratio_and_clips_whole_sequences():
    algo = AlgoConfig(loss="gspo", tis="none")
    # Segment 1: mean log-ratio 3e-4 -> s = e^{3e-4} = 1.0003, inside [0.9997, 1.0004]: not clipped.
    # Segment 2: mean log-ratio 6e-4 -> s = 1.0006 > 1.0004 with A > 0: clipped, loss -1.0004, no gradient.
    lp = row(-1.0, -2.0, -0.5, -0.7, 0.0)
    old = lp - row(2e-4, 4e-4, 5e-4, 7e-4, 0.0)
    kwargs = dict(
        old_logprobs=old,
        behaviour_logprobs=old,
        advantages=row(1, 1, 1, 1, 0),
        loss_mask=row(1, 1, 1, 1, 0),
        segment_ids=seg(1, 1, 2, 2, 0),
        algo=algo,
        norm_length=5.0,
    )
    loss, metrics = policy_loss(lp, **kwargs)
    s1 = math.exp(3e-4)
    # seq-mean-token-mean: mean over the two segments of each one's token mean.
    assert float(loss) == pytest.approx((-s1 - 1.0004) / 2, abs=1e-6)
    assert float(metrics["train/clip_frac"]) == pytest.approx(0.5)
    g = np.asarray(grad_wrt_logprobs(lp, **kwargs))[0]
    # Straight-through: d/dlp_t = -A s / (n_seq * n_tokens) = -1.0003 / 4. A gradient through the sequence
    # mean as well would double it; a token-level ratio would give -e^{2e-4}/4 and -e^{4e-4}/4.
    np.testing.assert_allclose(g, [-s1 / 4, -s1 / 4, 0.0, 0.0, 0.0], atol=1e-7)


def test_ppo_clip_and_dual_clip_follow_their_formulas():
    algo = AlgoConfig(
        loss="ppo", clip_low=0.2, clip_high=0.28, dual_clip=3.0, tis="none", loss_agg="token-mean"
    )
    log_r = row(0.3, -0.3, 1.5, math.log(1.1))
    adv = row(1.0, -1.0, -1.0, 1.0)
    lp = row(-1.0, -1.0, -1.0, -1.0)
    kwargs = dict(
        old_logprobs=lp - log_r,
        behaviour_logprobs=lp - log_r,
        advantages=adv,
        loss_mask=row(1, 1, 1, 1),
        segment_ids=seg(1, 1, 1, 1),
        algo=algo,
        norm_length=4.0,
    )
    loss, metrics = policy_loss(lp, **kwargs)
    # token 1: r = 1.35 > 1.28, A > 0 -> -1.28 (clipped); token 2: r = 0.741 < 0.8, A < 0 -> 0.8 (clipped);
    # token 3: r = 4.48, A < 0 -> max(4.48, 1.28) = 4.48, dual clip -> 3.0; token 4: r = 1.1 -> -1.1.
    # Without the dual clip the mean would be (-1.28 + 0.8 + 4.48 - 1.1) / 4 = 0.725.
    assert float(loss) == pytest.approx((-1.28 + 0.8 + 3.0 - 1.1) / 4, abs=1e-6)
    assert float(metrics["train/clip_frac"]) == pytest.approx(0.75)
    g = np.asarray(grad_wrt_logprobs(lp, **kwargs))[0]
    np.testing.assert_allclose(g, [0.0, 0.0, 0.0, -1.1 / 4], atol=1e-6)


def test_cispo_keeps_the_gradient_of_clipped_tokens_weighted_by_the_bounded_ratio():
    algo = AlgoConfig(loss="cispo", clip_low=1.0, clip_high=4.0, tis="none", loss_agg="token-mean")
    lp = row(-1.0, -1.0)
    old = row(-1.5, -3.0)  # r = e^{0.5} = 1.6487 (inside), r = e^{2} = 7.389 -> bounded at 5
    kwargs = dict(
        old_logprobs=old,
        behaviour_logprobs=old,
        advantages=row(1.0, 1.0),
        loss_mask=row(1, 1),
        segment_ids=seg(1, 1),
        algo=algo,
        norm_length=2.0,
    )
    loss, metrics = policy_loss(lp, **kwargs)
    assert float(loss) == pytest.approx((math.exp(0.5) * 1.0 + 5.0 * 1.0) / 2, abs=1e-5)  # -r A lp, lp = -1
    g = np.asarray(grad_wrt_logprobs(lp, **kwargs))[0]
    # PPO would give the clipped token zero gradient; CISPO weights it by the bound.
    np.testing.assert_allclose(g, [-math.exp(0.5) / 2, -5.0 / 2], atol=1e-5)
    assert float(metrics["train/clip_frac"]) == pytest.approx(0.5)


def test_aggregation_modes_normalise_per_packed_segment():
    values = row(1.0, 2.0, 4.0, 6.0, 9.0)
    mask = row(1, 1, 1, 1, 0)
    segments = seg(1, 2, 2, 2, 0)
    norm = loss_norm(mask, segments)
    # token-mean 13/4; seq-mean-token-mean (1 + 4)/2; sum-norm (1 + 12)/(2 * 10). The padding value 9 never
    # counts; treating the row as one sequence would give 3.25 for seq-mean-token-mean.
    assert float(aggregate(values, mask, segments, "token-mean", norm, 10.0)) == pytest.approx(3.25)
    assert float(aggregate(values, mask, segments, "seq-mean-token-mean", norm, 10.0)) == pytest.approx(2.5)
    assert float(aggregate(values, mask, segments, "seq-mean-token-sum-norm", norm, 10.0)) == pytest.approx(
        0.65
    )


def test_truncated_is_caps_the_trainer_over_rollout_ratio():
    old = row(-1.0, -1.0, -1.0)
    behaviour = row(-1.5, -2.0, -0.5)
    mask = row(1, 1, 1)
    segments = seg(1, 1, 1)
    w, kept = rollout_correction(old, behaviour, mask, segments, AlgoConfig(tis="token", tis_cap=2.0))
    # e^{0.5}, e^{1} = 2.718 capped at 2, e^{-0.5}; the reverse ratio would give e^{-0.5}, e^{-1}, e^{0.5}.
    np.testing.assert_allclose(np.asarray(w)[0], [math.exp(0.5), 2.0, math.exp(-0.5)], atol=1e-6)
    np.testing.assert_array_equal(np.asarray(kept), np.asarray(mask))
    w_seq, _ = rollout_correction(old, behaviour, mask, segments, AlgoConfig(tis="sequence", tis_cap=2.0))
    # sequence: e^{0.5 + 1 - 0.5} = e^{1} -> capped at 2 on every token.
    np.testing.assert_allclose(np.asarray(w_seq)[0], [2.0, 2.0, 2.0], atol=1e-6)


def test_masked_is_rejected_tokens_leave_numerator_and_denominator():
    algo = AlgoConfig(
        loss="ppo", clip_low=0.2, clip_high=0.2, tis="none", mis="token", mis_high=2.0, loss_agg="token-mean"
    )
    lp = row(-1.0, -1.0, -1.0)
    old = lp
    behaviour = row(-1.5, -2.0, -0.5)  # ρ = 1.65 (kept), 2.72 (rejected), 0.61 (kept, ≥ 0.5)
    adv = row(1.0, 5.0, 3.0)
    loss, metrics = policy_loss(
        lp,
        old,
        behaviour,
        adv,
        row(1, 1, 1),
        seg(1, 1, 1),
        algo,
        norm_length=3.0,
    )
    # on-policy ratio 1: loss = -mean(A) over the kept tokens = -(1 + 3) / 2. Keeping the rejected token in
    # the denominator (the slime #657 bug) would give -4/3; keeping it entirely, -3.
    assert float(loss) == pytest.approx(-2.0, abs=1e-6)
    assert float(metrics["train/is_rejected_frac"]) == pytest.approx(1 / 3)


def test_sequence_and_geometric_masks_reject_whole_segments():
    old = row(-1.0, -1.0, -1.0, -1.0)
    behaviour = row(-1.3, -1.3, -1.0005, -1.0)  # segment 1: Σ log ρ = 0.6; segment 2: 5e-4, mean 2.5e-4
    mask = row(1, 1, 1, 1)
    segments = seg(1, 1, 2, 2)
    _, kept = rollout_correction(old, behaviour, mask, segments, AlgoConfig(mis="sequence", mis_high=1.5))
    # ρ_seq = e^{0.6} = 1.82 > 1.5: segment 1 leaves; segment 2 has ρ = 1.0005.
    np.testing.assert_array_equal(np.asarray(kept)[0], [0, 0, 1, 1])
    _, kept = rollout_correction(old, behaviour, mask, segments, AlgoConfig(mis="geometric", mis_high=1.0002))
    # geometric: e^{0.3} and e^{2.5e-4} = 1.00025 are both above 1.0002: everything leaves.
    np.testing.assert_array_equal(np.asarray(kept)[0], [0, 0, 0, 0])
    _, kept = rollout_correction(old, behaviour, mask, segments, AlgoConfig(mis="geometric", mis_high=1.001))
    np.testing.assert_array_equal(np.asarray(kept)[0], [0, 0, 1, 1])


def test_k3_kl_to_the_reference_is_added_with_its_coefficient():
    assert float(k3_kl(jnp.asarray(-1.0), jnp.asarray(-0.5))) == pytest.approx(math.exp(0.5) - 1.5, abs=1e-6)
    algo = AlgoConfig(loss="ppo", clip_low=0.2, clip_high=0.2, tis="none", kl_coef=0.1, loss_agg="token-mean")
    lp = row(-1.0, -2.0)
    loss, metrics = policy_loss(
        lp, lp, lp, row(0.0, 0.0), row(1, 1), seg(1, 1), algo, norm_length=2.0, ref_logprobs=row(-0.5, -2.0)
    )
    # zero advantage: only the KL term, (e^{0.5} - 1.5 + 0) / 2 times 0.1.
    assert float(metrics["train/kl_ref"]) == pytest.approx((math.exp(0.5) - 1.5) / 2, abs=1e-6)
    assert float(loss) == pytest.approx(0.1 * (math.exp(0.5) - 1.5) / 2, abs=1e-6)


def test_dropped_trials_contribute_exactly_zero_gradient():
    algo = AlgoConfig()
    rng = np.random.default_rng(0)
    lp = jnp.asarray(rng.normal(-1.0, 0.3, (2, 6)), jnp.float32)
    old = lp - jnp.asarray(rng.normal(0, 1e-4, (2, 6)), jnp.float32)
    adv = jnp.asarray([[1.0] * 3 + [-0.5] * 3, [2.0] * 6], jnp.float32)
    segments = jnp.asarray([[1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 1, 1]], jnp.int32)
    mask = jnp.ones((2, 6), jnp.float32)
    dropped = mask.at[1].set(0.0)  # the second row's trial is an infrastructure failure: loss mask 0

    def loss_of(x, m, a):
        return policy_loss(x, old, old, a, m, segments, algo, norm_length=6.0)[0]

    with_dropped = jax.grad(loss_of)(lp, dropped, adv)
    assert np.all(np.asarray(with_dropped)[1] == 0.0)
    # Without the dropped row at all: the same loss and the same gradient on the kept row, bit for bit.
    without = jax.grad(
        lambda x: policy_loss(x, old[:1], old[:1], adv[:1], mask[:1], segments[:1], algo, norm_length=6.0)[0]
    )(lp[:1])
    np.testing.assert_array_equal(np.asarray(with_dropped)[:1], np.asarray(without))
    assert float(loss_of(lp, dropped, adv)) == float(
        policy_loss(lp[:1], old[:1], old[:1], adv[:1], mask[:1], segments[:1], algo, norm_length=6.0)[0]
    )


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batch_shares_sum_to_the_mini_batch_loss(agg):
    algo = AlgoConfig(loss_agg=agg, mis="token", mis_high=1.5)
    rng = np.random.default_rng(1)
    shape = (4, 8)
    lp = jnp.asarray(rng.normal(-1.0, 0.3, shape), jnp.float32)
    old = lp - jnp.asarray(rng.normal(0, 2e-4, shape), jnp.float32)
    behaviour = old - jnp.asarray(rng.normal(0, 0.3, shape), jnp.float32)
    adv = jnp.asarray(rng.normal(0, 1, shape), jnp.float32)
    segments = jnp.asarray(np.repeat([[1, 1, 1, 2, 2, 3, 3, 0]], 4, 0), jnp.int32)
    mask = jnp.asarray(rng.integers(0, 2, shape) * (np.asarray(segments) > 0), jnp.float32)
    _, kept = rollout_correction(old, behaviour, mask, segments, algo)
    norm = loss_norm(kept, segments, sampled_mask=mask)
    full, full_metrics = policy_loss(lp, old, behaviour, adv, mask, segments, algo, norm_length=8.0)
    parts = [
        policy_loss(
            lp[i : i + 2],
            old[i : i + 2],
            behaviour[i : i + 2],
            adv[i : i + 2],
            mask[i : i + 2],
            segments[i : i + 2],
            algo,
            norm_length=8.0,
            norm=norm,
        )
        for i in (0, 2)
    ]
    assert float(sum(p[0] for p in parts)) == pytest.approx(float(full), abs=1e-6)
    for key in full_metrics:
        assert float(sum(p[1][key] for p in parts)) == pytest.approx(float(full_metrics[key]), abs=1e-6), key


@pytest.mark.parametrize(
    "field, value",
    [
        ("loss", "grpo"),
        ("loss_agg", "seq-sum"),
        ("tis", "seq"),
        ("mis", "tokens"),
        ("clip_low", 1.5),
        ("dual_clip", 0.5),
        ("tis_cap", 0.0),
        ("kl_coef", -1.0),
        ("mis_low", 3.0),
        ("advantage_std", "ddof"),
    ],
)
def test_bad_algo_values_are_named(field, value):
    with pytest.raises(
        ValueError, match=rf"algo\.{field}.*{value!r}" if isinstance(value, str) else rf"algo\.{field}"
    ):
        AlgoConfig(**{field: value})


def test_importance_stats_report_ratio_extremes_capped_share_and_ess_of_the_applied_weights():
    # Sampled tokens with ratios 0.5, 1, 3, 1.5 in two segments; a context token with ratio 100 is ignored
    # (counting it would make the max 100 and the mean 21.2).
    behaviour = row(-1.0, -1.0, -1.0, -1.0, -1.0)
    old = behaviour + jnp.log(row(0.5, 1.0, 3.0, 1.5, 100.0))
    mask, segments = row(1, 1, 1, 1, 0), seg(1, 1, 2, 2, 0)
    algo = AlgoConfig(tis="token", tis_cap=2.0, mis="token", mis_high=2.5)  # accepts [0.4, 2.5]
    m = {k: float(v) for k, v in importance_stats(old, behaviour, mask, segments, algo).items()}
    assert m["train/is_ratio_mean"] == pytest.approx(1.5, rel=1e-6)
    assert m["train/is_ratio_max"] == pytest.approx(3.0, rel=1e-6)
    assert m["train/is_ratio_min"] == pytest.approx(0.5, rel=1e-6)
    assert m["train/is_clipped_frac"] == pytest.approx(0.25)  # only the ratio 3 is capped at 2
    # Applied weights (0.5, 1, 0 rejected by MIS, 1.5): (3)^2 / (4 * 3.5) = 9/14. Ignoring the rejection
    # would give the capped weights' (5)^2 / (4 * 7.5) = 5/6.
    assert m["train/is_ess"] == pytest.approx(9 / 14, rel=1e-6)

    plain = importance_stats(old, behaviour, mask, segments, AlgoConfig(tis="none", mis="none"))
    assert float(plain["train/is_ess"]) == pytest.approx(1.0) and float(plain["train/is_clipped_frac"]) == 0.0
    # Sequence TIS: segment 2's ratio 3 * 1.5 = 4.5 is capped, so both of its tokens count.
    seq_tis = importance_stats(old, behaviour, mask, segments, AlgoConfig(tis="sequence", tis_cap=2.0))
    assert float(seq_tis["train/is_clipped_frac"]) == pytest.approx(0.5)


def test_importance_stats_of_a_batch_without_sampled_tokens_are_zero():
    zeros = row(0.0, 0.0)
    m = importance_stats(zeros, zeros, zeros, seg(1, 1), AlgoConfig())
    assert {k: float(v) for k, v in m.items()} == {
        "train/is_ratio_mean": 0.0,
        "train/is_ratio_max": 0.0,
        "train/is_ratio_min": 0.0,
        "train/is_clipped_frac": 0.0,
        "train/is_ess": 0.0,
    }
