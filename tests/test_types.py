"""The stage records: a TrainBatch is a pytree the trainer takes as it is, a harness run ends in a policy
Outcome (the one encoding of how a run ended)."""

import dataclasses

import jax
import numpy as np
import pytest

import legorl_jax.train.batch  # noqa: F401  (registers TrainBatch as a pytree)
from legorl_jax.harness.base import HarnessResult
from legorl_jax.types import Generation, Outcome, Sequence, SessionFlags, TrainBatch, Trajectory


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


def _sequence(mask, versions=None, weight_versions=()):
    n = len(mask)
    return Sequence(
        np.arange(n, dtype=np.int32),
        np.asarray(mask, np.int8),
        np.where(np.asarray(mask) == 1, -0.5, 0.0).astype(np.float32),
        None,
        weight_versions=weight_versions,
        token_versions=None if versions is None else np.asarray(versions, np.int32),
    )


def _trajectory(*sequences):
    return Trajectory("t-0", "t", "g", tuple(sequences), 1.0, Outcome.SUBMITTED)


def test_a_trajectory_counts_its_sampled_tokens_per_version_and_names_the_oldest():
    main = _sequence([0, 1, 1, 0, 1, 1, 1], [-1, 3, 3, -1, 4, 4, 4], ("step-000003", "step-000004"))
    side = _sequence([0, 1, 1], None, ("step-000002",))  # no per-token record: all of its one version
    t = _trajectory(main, side)
    assert t.version_tokens == {2: 2, 3: 2, 4: 3}
    assert t.sampled_versions == {2, 3, 4} and t.oldest_version == 2
    nothing = _trajectory(_sequence([0, 0], [-1, -1]))
    assert (
        nothing.version_tokens == {} and nothing.oldest_version is None and nothing.sampled_versions == set()
    )


def test_a_trajectory_whose_tokens_cannot_be_attributed_to_one_version_says_which():
    mixed = _trajectory(_sequence([0, 1, 1], None, ("step-000001", "step-000002")))
    with pytest.raises(ValueError, match="'t-0' sequence 0 records no per-token versions"):
        _ = mixed.oldest_version
    unknown = _trajectory(_sequence([0, 1], [-1, -1]))  # a sampled token without a version
    with pytest.raises(ValueError, match="'t-0' has 1 sampled tokens of version -1"):
        _ = unknown.version_tokens


def test_select_rows_takes_the_token_versions_rows_too():
    full = dataclasses.replace(batch(), token_versions=np.arange(12, dtype=np.int32).reshape(4, 3))
    assert len(jax.tree.leaves(full)) == 9
    np.testing.assert_array_equal(
        full.select_rows(slice(1, None, 2)).token_versions, [[3, 4, 5], [9, 10, 11]]
    )


def test_select_rows_takes_the_stale_kv_rows_too():
    full = dataclasses.replace(batch(), stale_kv=(np.arange(12).reshape(4, 3) % 2).astype(np.int8))
    assert len(jax.tree.leaves(full)) == 9
    np.testing.assert_array_equal(full.select_rows(slice(0, 2)).stale_kv, [[0, 1, 0], [1, 0, 1]])


def test_a_generation_flags_its_stale_kv_tokens_one_per_output_token_and_counts_them():
    def gen(stale):
        return Generation(np.arange(4, dtype=np.int32), np.zeros(4, np.float32), None, "length", "v", 2,
                          token_stale_kv=stale)  # fmt: skip

    assert gen(None).stale_kv_tokens == 0
    assert gen(np.asarray([False, False, True, True])).stale_kv_tokens == 2
    with pytest.raises(ValueError, match=r"token_stale_kv must be bool\[4\] .*, got bool\[3\]"):
        gen(np.asarray([True, True, True]))
    with pytest.raises(ValueError, match=r"token_stale_kv must be bool\[4\] .*, got int64\[4\]"):
        gen(np.asarray([0, 0, 1, 1]))
    with pytest.raises(ValueError, match=r"stale_kv has length 2, token_ids has 3"):
        Sequence(np.zeros(3, np.int32), np.ones(3, np.int8), np.zeros(3, np.float32), None,
                 stale_kv=np.zeros(2, np.int8))  # fmt: skip


def test_session_flags_read_back_from_their_dict_and_refuse_an_unknown_name_or_a_non_bool():
    flags = SessionFlags(context_overflow=True, format_failure=True)
    on_disk = flags.to_dict()
    assert on_disk == {
        "context_overflow": True,
        "no_tool_collapse": False,
        "format_failure": True,
        "engine_failed": False,
    }
    assert SessionFlags.from_dict(on_disk) == flags
    assert flags.raised() == ("context_overflow", "format_failure")
    with pytest.raises(ValueError, match="unknown session flag 'crashed'"):
        SessionFlags.from_dict({"crashed": True})
    with pytest.raises(ValueError, match="engine_failed must be a bool, got 1"):
        SessionFlags.from_dict({"engine_failed": 1})
