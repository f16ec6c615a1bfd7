"""The sampler: behaviour log-probs before filtering, each filter's support, the sampled distribution,
and a row's token depending on its own (seed, position) and logits only."""

import jax
import numpy as np
import pytest

from legorl_jax.engine.base import SamplingParams
from legorl_jax.engine.sampler import SamplingRows, block_size, gumbel_max, sample, token_keys

sample_jit = jax.jit(sample)
# probabilities 0.5, 0.3, 0.1, 0.05, 0.05 (and nothing else) at temperature 1
PROBS = np.array([0.5, 0.3, 0.1, 0.05, 0.05], np.float64)
LOGITS = np.log(PROBS).astype(np.float32)


def draw(params, n=256, logits=LOGITS, seed=7):
    """n draws of one parameter set at positions 0..n-1 (one row each)."""
    rows = SamplingRows.host([params] * n, [seed] * n)
    tokens, lps = sample_jit(np.tile(logits, (n, 1)), rows, np.arange(n, dtype=np.int32))
    return np.asarray(tokens), np.asarray(lps)


def log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - np.log(np.sum(np.exp(x - x.max()))) - x.max()


def test_greedy_rows_take_the_argmax_and_report_the_untempered_logprob():
    tokens, lps = draw(SamplingParams(temperature=0.0), n=8)
    assert set(tokens.tolist()) == {0}
    np.testing.assert_allclose(lps, np.log(0.5), atol=1e-6)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.7),
        SamplingParams(temperature=0.7, top_k=2),
        SamplingParams(temperature=0.7, top_p=0.6),
    ],
    ids=["unfiltered", "top_k", "top_p"],
)
def test_the_logprob_is_log_softmax_of_logits_over_temperature_before_any_filter(params):
    tokens, lps = draw(params)
    expected = log_softmax(LOGITS / 0.7)[tokens]
    np.testing.assert_allclose(lps, expected, atol=1e-6)


@pytest.mark.parametrize(
    ("params", "support"),
    [
        (SamplingParams(top_k=1), {0}),
        (SamplingParams(top_k=3), {0, 1, 2}),
        # mass before token 1 is 0.5 <= 0.6, before token 2 it is 0.8 > 0.6
        (SamplingParams(top_p=0.6), {0, 1}),
        (SamplingParams(top_p=0.1), {0}),  # the most likely token is always kept
        (SamplingParams(min_p=0.25), {0, 1}),  # p >= 0.25 * 0.5
        (SamplingParams(top_k=3, top_p=0.6), {0, 1}),
    ],
    ids=["top_k_1", "top_k_3", "top_p_0.6", "top_p_0.1", "min_p", "top_k_and_top_p"],
)
def test_filters_keep_exactly_the_tokens_their_rule_allows(params, support):
    tokens, _ = draw(params, n=512)
    assert set(tokens.tolist()) == support


def test_unfiltered_sampling_follows_softmax_of_logits_over_temperature():
    n = 8000
    tokens, _ = draw(SamplingParams(temperature=2.0), n=n)
    expected = np.exp(log_softmax(LOGITS / 2.0))
    freq = np.bincount(tokens, minlength=len(PROBS)) / n
    # 4 standard errors of a binomial proportion: a biased sampler (e.g. ignoring T) is far outside.
    np.testing.assert_array_less(np.abs(freq - expected), 4 * np.sqrt(expected * (1 - expected) / n))


def test_a_rows_token_depends_on_its_seed_and_position_only():
    rng = np.random.default_rng(0)
    mine = SamplingParams(temperature=1.0)
    row_logits = rng.normal(size=(1, 64)).astype(np.float32)
    alone = sample_jit(row_logits, SamplingRows.host([mine], [99]), np.array([5], np.int32))
    neighbours = [
        SamplingParams(top_k=2),
        SamplingParams(temperature=0.0),
        SamplingParams(top_p=0.3, temperature=0.5),
    ]
    logits = np.concatenate([rng.normal(size=(3, 64)).astype(np.float32), row_logits])
    together = sample_jit(
        logits, SamplingRows.host([*neighbours, mine], [1, 2, 3, 99]), np.array([0, 9, 5, 5], np.int32)
    )
    assert int(together[0][3]) == int(alone[0][0])
    assert float(together[1][3]) == float(alone[1][0])


def test_seeds_and_positions_give_different_draws_and_the_same_ones_again():
    a, _ = draw(SamplingParams(), n=64, seed=1)
    b, _ = draw(SamplingParams(), n=64, seed=1)
    c, _ = draw(SamplingParams(), n=64, seed=2**40 + 1)  # differs in the high half only
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert len(set(a.tolist())) > 1  # positions are different draws


def test_the_two_stage_draw_follows_the_softmax_across_uneven_blocks():
    """V = 37: blocks of 8, the last one padded; every token's frequency matches its probability."""
    assert block_size(37) == 8
    rng = np.random.default_rng(3)
    logits = rng.normal(scale=1.5, size=(1, 37)).astype(np.float32)
    logits[0, 5] = -np.inf  # a filtered token is never drawn
    n = 20000
    keys = token_keys(np.full(n, 11, np.uint32), np.zeros(n, np.uint32), np.arange(n, dtype=np.int32))
    tokens = np.asarray(jax.jit(gumbel_max)(np.repeat(logits, n, axis=0), keys))
    expected = np.exp(log_softmax(np.where(np.isinf(logits[0]), -1e30, logits[0])))
    freq = np.bincount(tokens, minlength=37) / n
    assert freq[5] == 0 and tokens.max() < 37
    np.testing.assert_array_less(np.abs(freq - expected), 4 * np.sqrt(expected * (1 - expected) / n) + 1e-9)
