"""Staleness and per-version-gap figures on hand-built trials, every expected number counted by hand."""

import math

import numpy as np
import pytest

from legorl_jax.monitor.offpolicy import gap_metrics, staleness_metrics
from legorl_jax.types import Outcome, Sequence, Trajectory


def trial(name, *runs):
    """A one-sequence trial: a 2-token prompt, then `runs` of (version, sampled tokens) in order."""
    versions = [-1, -1] + [v for v, n in runs for _ in range(n)]
    mask = [0, 0] + [1] * (len(versions) - 2)
    t = len(versions)
    seq = Sequence(
        np.arange(t, dtype=np.int32),
        np.asarray(mask, np.int8),
        np.where(np.asarray(mask) == 1, -1.0, 0.0).astype(np.float32),
        None,
        token_versions=np.asarray(versions, np.int32),
    )
    return Trajectory(name, "task", "g", (seq,), 1.0, Outcome.SUBMITTED)


def test_staleness_histogram_tokens_per_gap_and_spanning_share_are_counted_exactly():
    trials = [
        trial("fresh", (5, 10)),  # staleness 0
        trial("updated-mid-trial", (4, 3), (5, 7)),  # staleness 1, spans two versions
        trial("old", (2, 4)),  # staleness 3
        trial("older", (1, 2), (3, 5)),  # staleness 4 -> the 3plus bucket; spans two versions
        trial("sampled-nothing"),  # not counted: it has no version
    ]
    m = staleness_metrics(trials, trainer_version=5)
    # Shares of the 4 trials that sampled anything (counting the empty one would give 1/5, 1/5, 0, 2/5).
    assert [m[f"offpolicy/staleness_{k}"] for k in ("0", "1", "2", "3plus")] == [0.25, 0.25, 0.0, 0.5]
    # Gap per token: v5 -> 0 (10 + 7), v4 -> 1 (3), v3 -> 2 (5), v2 and v1 -> 3plus (4 + 2).
    assert [m[f"offpolicy/tokens_gap_{k}"] for k in ("0", "1", "2", "3plus")] == [17.0, 3.0, 5.0, 6.0]
    assert m["offpolicy/multi_version_share"] == 0.5
    # Staleness uses the *oldest* version: "older" is 4, not 2 (its newest) nor 3 (its token mean, ~2.6).
    assert m["offpolicy/staleness_mean"] == (0 + 1 + 3 + 4) / 4 and m["offpolicy/staleness_max"] == 4.0
    assert m["offpolicy/trajectories"] == 4.0


def test_staleness_of_no_sampled_trial_is_all_zeros():
    m = staleness_metrics([trial("empty")], trainer_version=0)
    assert m["offpolicy/trajectories"] == 0.0 and m["offpolicy/staleness_0"] == 0.0
    assert m["offpolicy/multi_version_share"] == 0.0 and m["offpolicy/staleness_max"] == 0.0


def test_a_trial_newer_than_the_trainer_or_a_bad_trainer_version_is_named():
    with pytest.raises(
        ValueError, match="trajectory 'ahead' sampled under version 6, newer than the trainer's 5"
    ):
        staleness_metrics([trial("ahead", (6, 1))], trainer_version=5)
    for bad in (-1, 2.0, True, "5"):
        with pytest.raises(ValueError, match=f"trainer_version must be an int >= 0, got {bad!r}"):
            staleness_metrics([], trainer_version=bad)


def test_gap_metrics_give_each_present_buckets_mean_ratio_and_ess():
    gaps = np.asarray([0, 0, 1, 5])
    log_ratios = np.log([1.0, 2.0, 0.5, 4.0])
    m = gap_metrics(gaps, log_ratios)
    # Gap 0: w = (1, 2): mean 1.5, ESS (1 + 2)^2 / (2 (1 + 4)) = 0.9. Gap 1: one token, ESS 1.
    assert m["train/is_ratio_mean_gap_0"] == pytest.approx(1.5)
    assert m["train/is_ess_gap_0"] == pytest.approx(0.9)
    assert m["train/is_ratio_mean_gap_1"] == pytest.approx(0.5) and m["train/is_ess_gap_1"] == pytest.approx(
        1.0
    )
    assert m["train/is_ratio_mean_gap_3plus"] == pytest.approx(4.0)
    assert "train/is_ratio_mean_gap_2" not in m and len(m) == 6  # no token of gap 2
    with pytest.raises(ValueError, match="version gaps must be >= 0"):
        gap_metrics(np.asarray([-1]), np.asarray([0.0]))
    with pytest.raises(ValueError, match="must be the same 1-D shape"):
        gap_metrics(np.asarray([0, 1]), np.asarray([0.0]))
    assert math.isclose(
        gap_metrics(np.asarray([2]), np.asarray([100.0]))["train/is_ratio_mean_gap_2"], math.exp(20)
    )
