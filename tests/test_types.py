"""The stage records: a TrainBatch is a pytree the trainer takes as it is, a harness run ends in a policy
Outcome (the one encoding of how a run ended)."""

import jax
import numpy as np
import pytest

import legorl_jax.train.batch  # noqa: F401  (registers TrainBatch as a pytree)
from legorl_jax.harness.base import HarnessResult
from legorl_jax.types import Outcome, TrainBatch


def batch(rows: int = 4, t: int = 3, routing: bool = True) -> TrainBatch:
    grid = np.arange(rows * t, dtype=np.int32).reshape(rows, t)
    return TrainBatch(
        tokens=grid,
        targets=grid + 1,
        positions=grid + 2,
        segment_ids=grid + 3,
        loss_mask=np.ones((rows, t), np.float32),
        advantages=grid.astype(np.float32),
        behaviour_logprobs=-grid.astype(np.float32),
        routed_experts=np.stack([grid, -grid])[..., None] if routing else None,  # [L=2, B, T, K=1]
    )


def test_a_train_batch_is_a_pytree_with_one_leaf_per_field_and_none_for_absent_routing():
    assert len(jax.tree.leaves(batch())) == 8 and len(jax.tree.leaves(batch(routing=False))) == 7
    doubled = jax.tree.map(lambda x: x * 2, batch(routing=False))
    assert isinstance(doubled, TrainBatch) and doubled.routed_experts is None
    np.testing.assert_array_equal(doubled.advantages, 2 * batch().advantages)


def test_select_rows_takes_the_same_rows_of_every_field_and_the_routing_second_axis():
    full = batch()
    odd = full.select_rows(slice(1, None, 2))
    assert odd.rows == 2 and odd.routed_experts.shape == (2, 2, 3, 1)
    np.testing.assert_array_equal(odd.tokens, full.tokens[[1, 3]])
    np.testing.assert_array_equal(odd.behaviour_logprobs, full.behaviour_logprobs[[1, 3]])
    np.testing.assert_array_equal(odd.routed_experts[1, :, :, 0], -full.tokens[[1, 3]])


@pytest.mark.parametrize("bad", ["submitted", Outcome.TIMEOUT, Outcome.HARNESS_CRASHED, None])
def test_a_harness_result_takes_only_a_policy_outcome_and_names_what_it_got(bad):
    with pytest.raises(ValueError, match=f"exit_status must be a policy Outcome .* got {bad!r}"):
        HarnessResult(bad, 1)
    assert HarnessResult(Outcome.STEP_LIMIT, 1).exit_status is Outcome.STEP_LIMIT
