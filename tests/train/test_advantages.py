"""Group-relative advantages against hand-computed values."""

import math

import numpy as np
import pytest

from legorl_jax.train.advantages import grpo_advantages, trajectory_advantages
from legorl_jax.types import Outcome, Trajectory


def test_one_success_in_eight_gives_2_475_with_the_unbiased_std():
    rewards = [1.0] + [0.0] * 7
    adv = grpo_advantages(rewards, ["g"] * 8)
    # mean 0.125, unbiased std sqrt(8 * 0.125 * 0.875 / 7) = sqrt(0.125); a biased std would give 2.646.
    std = math.sqrt(0.125)
    assert adv[0] == pytest.approx(0.875 / (std + 1e-6), abs=1e-6)
    assert adv[0] == pytest.approx(2.475, abs=1e-3)
    np.testing.assert_allclose(adv[1:], -0.125 / (std + 1e-6), atol=1e-6)
    assert adv.dtype == np.float32


def test_equal_rewards_give_zero_advantage():
    adv = grpo_advantages([1.0, 1.0, 1.0, 0.0, 0.0], ["a", "a", "a", "b", "b"])
    # A missing eps would give 0/0 = NaN here.
    np.testing.assert_array_equal(adv, np.zeros(5, np.float32))


def test_dropped_trials_get_zero_and_leave_their_siblings_statistics():
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0]
    valid = [True, True, True, True, False]
    adv = grpo_advantages(rewards, ["g"] * 5, valid=valid)
    # Over the four valid trials: mean 0.25, unbiased std 0.5. Counting the dropped success would give
    # mean 0.4 and A[0] = 0.6 / 0.5477 = 1.095.
    assert adv[4] == 0.0
    assert adv[0] == pytest.approx(0.75 / (0.5 + 1e-6), abs=1e-6)
    np.testing.assert_allclose(adv[1:4], -0.25 / (0.5 + 1e-6), atol=1e-6)


def test_biased_std_and_no_std_follow_their_formulas():
    biased = grpo_advantages([1.0, 0.0], ["g", "g"], std="biased")
    # population std of {1, 0} is 0.5; the unbiased one would be 0.7071 (A = 0.7071).
    np.testing.assert_allclose(biased, [0.5 / 0.500001, -0.5 / 0.500001], atol=1e-6)
    dr = grpo_advantages([3.0, 1.0, 2.0], ["g"] * 3, std="none")
    np.testing.assert_allclose(dr, [1.0, -1.0, 0.0], atol=1e-6)


def test_a_singleton_group_gets_no_advantage():
    adv = grpo_advantages([1.0, 1.0, 0.0], ["alone", "pair", "pair"])
    # verl would give the singleton its raw reward 1.0; there is no sibling to be better than.
    assert adv[0] == 0.0
    assert adv[1] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-6), abs=1e-6)


def test_trajectory_advantages_group_by_group_id_and_drop_infra_failures():
    def traj(group, reward, outcome=Outcome.SUBMITTED):
        return Trajectory(
            trial_id=f"{group}{reward}",
            task_id=group,
            group_id=group,
            sequences=(),
            reward=reward,
            outcome=outcome,
        )

    trajs = [
        traj("a", 1.0),
        traj("a", 0.0),
        traj("b", 0.0),
        traj("b", 1.0),
        traj("b", float("nan"), Outcome.TIMEOUT),
    ]
    adv = trajectory_advantages(trajs)
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)
    np.testing.assert_allclose(adv, [expected, -expected, -expected, expected, 0.0], atol=1e-6)
    # negative_weight scales only the trials worse than their group's mean.
    damped = trajectory_advantages(trajs, negative_weight=0.25)
    np.testing.assert_allclose(damped, [expected, -expected / 4, -expected / 4, expected, 0.0], atol=1e-6)
    assert damped.dtype == np.float32
    np.testing.assert_array_equal(trajectory_advantages(trajs, negative_weight=0.0), np.maximum(adv, 0))


@pytest.mark.parametrize("bad", [-0.1, 1.5, True])
def test_negative_weight_outside_0_1_is_refused_naming_the_value(bad):
    from legorl_jax.config import AlgoConfig

    with pytest.raises(ValueError, match=f"negative_weight must lie in \\[0, 1\\], got {bad!r}"):
        trajectory_advantages([], negative_weight=bad)
    with pytest.raises(ValueError, match=f"algo.negative_weight must lie in \\[0, 1\\], got {bad!r}"):
        AlgoConfig(negative_weight=bad)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"std": "population"}, "'population'"),
        ({"valid": [True]}, "valid has shape"),
    ],
)
def test_bad_advantage_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        grpo_advantages([1.0, 0.0], ["g", "g"], **kwargs)


def test_non_finite_rewards_of_valid_trials_are_refused():
    with pytest.raises(ValueError, match="index 1 has nan"):
        grpo_advantages([1.0, float("nan")], ["g", "g"])
    with pytest.raises(ValueError, match="group_ids has 1 entries"):
        grpo_advantages([1.0, 0.0], ["g"])
