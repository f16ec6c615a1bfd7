"""Packing trials into a TrainBatch: layout, alignment, routing rows, overlong and dropped trials."""

import numpy as np
import pytest

from legorl_jax.config import AlgoConfig
from legorl_jax.train.batch import (
    RoutingSpec,
    pack_trajectories,
    sequence_from_generation,
    trajectories_from_generations,
)
from legorl_jax.train.loss import policy_loss
from legorl_jax.types import Generation, Outcome, Sequence, Trajectory

SPEC = RoutingSpec(num_layers=2, top_k=2, num_experts=4)


def make_sequence(tokens, mask, logprobs=None, routed=None):
    tokens = np.asarray(tokens, np.int32)
    lp = np.asarray(logprobs if logprobs is not None else -0.1 * (np.arange(len(tokens)) + 1), np.float32)
    return Sequence(tokens, np.asarray(mask, np.int8), lp, routed)


def make_trajectory(name, *sequences, reward=1.0, outcome=Outcome.SUBMITTED, group="g"):
    return Trajectory(
        trial_id=name, task_id="t", group_id=group, sequences=tuple(sequences), reward=reward, outcome=outcome
    )


def test_segments_are_laid_out_with_targets_masks_and_logprobs_aligned_to_the_predicting_position():
    a = make_sequence([11, 12, 13], [0, 1, 1], [0.0, -0.2, -0.3])
    b = make_sequence([21, 22], [0, 1], [0.0, -0.5])
    batch, stats = pack_trajectories(
        [make_trajectory("a", a), make_trajectory("b", b)], [2.0, -1.0], max_tokens=6
    )
    np.testing.assert_array_equal(batch.tokens, [[11, 12, 13, 21, 22, 0]])
    np.testing.assert_array_equal(batch.positions, [[0, 1, 2, 0, 1, 0]])
    np.testing.assert_array_equal(batch.segment_ids, [[1, 1, 1, 2, 2, 0]])
    # Position t carries the target t + 1 of its own segment: 13 -> 21 never becomes a target. A one-off
    # shift would put mask 1 on the last token of each segment.
    np.testing.assert_array_equal(batch.targets, [[12, 13, 0, 22, 0, 0]])
    np.testing.assert_array_equal(batch.loss_mask, [[1, 1, 0, 1, 0, 0]])
    np.testing.assert_allclose(batch.behaviour_logprobs, [[-0.2, -0.3, 0, -0.5, 0, 0]])
    np.testing.assert_allclose(batch.advantages, [[2.0, 2.0, 0, -1.0, 0, 0]])
    assert batch.routed_experts is None
    assert (stats.rows, stats.sequences, stats.sampled_tokens, stats.filled_tokens) == (1, 2, 3, 5)


def test_rows_are_filled_first_fit_longest_first_and_bucketed_to_powers_of_two():
    seqs = [make_sequence(np.arange(n) + 1, [0] + [1] * (n - 1)) for n in (2, 5, 3, 4)]
    trajs = [make_trajectory(str(i), s) for i, s in enumerate(seqs)]
    batch, stats = pack_trajectories(trajs, np.zeros(4), max_tokens=7)
    # longest first: 5 -> row 0, 4 -> row 1, 3 -> row 1 (4 + 3 = 7), 2 -> row 0 (5 + 2 = 7).
    np.testing.assert_array_equal(batch.segment_ids, [[1] * 5 + [2] * 2, [1] * 4 + [2] * 3])
    np.testing.assert_array_equal(batch.tokens, [[1, 2, 3, 4, 5, 1, 2], [1, 2, 3, 4, 1, 2, 3]])
    assert stats.rows_used == 2 and stats.fill == 1.0
    # width 5: rows {5}, {4}, {3, 2} -> 3 rows used, bucketed to 4 (or to 3 × 2^0 with row_multiple 3).
    batch, stats = pack_trajectories(trajs, np.zeros(4), max_tokens=5)
    assert stats.rows == 4 and batch.tokens.shape == (4, 5) and stats.rows_used == 3
    assert not batch.segment_ids[3].any()
    assert pack_trajectories(trajs, np.zeros(4), max_tokens=5, row_multiple=3)[1].rows == 3
    # width 4 (the 5 is refused): rows {4}, {3}, {2} -> 3 used; row_multiple 3 gives 3 × 2^0.
    _, stats = pack_trajectories(trajs, np.zeros(4), max_tokens=4, row_multiple=3)
    assert (stats.rows, stats.rows_used, stats.overlong) == (3, 3, 1)
    # width 3 (4 and 5 refused): rows {3}, {2} -> 2 used; row_multiple 3 gives 3.
    assert pack_trajectories(trajs, np.zeros(4), max_tokens=3, row_multiple=3)[1].rows == 3
    # min_rows pins the shape: 3 rows used, at least 5 asked -> 8 (2^3), or 2 × 2^2 with row_multiple 2.
    assert pack_trajectories(trajs, np.zeros(4), max_tokens=5, min_rows=5)[1].rows == 8
    assert pack_trajectories(trajs, np.zeros(4), max_tokens=5, min_rows=8, row_multiple=2)[1].rows == 8


def test_routed_experts_land_row_for_row_at_the_packed_input_position():
    routed = np.full((3, 2, 2), -1, np.int16)
    routed[1] = [[0, 1], [2, 3]]  # experts of input position 1 (they produced the logits of token 2)
    routed[0] = [[3, 2], [1, 0]]
    a = make_sequence([5, 6, 7], [0, 1, 1], routed=routed)
    b = make_sequence([8, 9, 10, 11], [0, 0, 1, 1])  # no routing recorded: native
    batch, _ = pack_trajectories(
        [make_trajectory("a", a), make_trajectory("b", b)], [1.0, 1.0], max_tokens=8, routing=SPEC
    )
    re = batch.routed_experts
    assert re.shape == (2, 1, 8, 2)
    # b (longer) comes first at offset 0; a at offset 4. Shifting by one would move [0, 1] to offset 6.
    np.testing.assert_array_equal(re[:, 0, 4], [[3, 2], [1, 0]])
    np.testing.assert_array_equal(re[:, 0, 5], [[0, 1], [2, 3]])
    assert (re[:, 0, 6] == -1).all() and (re[:, 0, :4] == -1).all() and (re[:, 0, 7] == -1).all()


def test_a_trial_with_a_sequence_longer_than_a_row_is_refused_whole_never_cut(caplog):
    long = make_sequence(np.arange(1, 11), [0, 0] + [1] * 8)
    first_turn = make_sequence([7, 8, 9], [0, 1, 1])  # fits, but its trial is refused with the long turn
    short = make_sequence([1, 2, 3], [0, 1, 1])
    trajs = [make_trajectory("long", first_turn, long), make_trajectory("short", short)]
    with caplog.at_level("WARNING", logger="legorl_jax.train.batch"):
        batch, stats = pack_trajectories(trajs, [1.0, 1.0], max_tokens=6)
    np.testing.assert_array_equal(batch.tokens, [[1, 2, 3, 0, 0, 0]])  # neither a prefix nor the first turn
    assert (stats.overlong, stats.refused, stats.sequences) == (1, (("long", 10),), 1)
    assert stats.as_metrics()["batch/overlong"] == 1.0 and "batch/refused" not in stats.as_metrics()
    assert "1 trial(s) refused" in caplog.text and "long 10" in caplog.text
    # A sequence of exactly max_tokens fits.
    _, stats = pack_trajectories(trajs, [1.0, 1.0], max_tokens=10)
    assert (stats.overlong, stats.refused, stats.sequences) == (0, (), 3)


def test_dropped_trials_are_left_out_of_the_batch_and_counted():
    ok = make_sequence([1, 2, 3], [0, 1, 1])
    # An infrastructure failure may have recorded anything (here a NaN log-prob): it is neither packed
    # nor checked. Packing it with a zero mask would still feed its tokens to the MoE aux loss.
    failed = make_sequence([4, 5, 6], [0, 1, 1], [0.0, float("nan"), -0.1])
    batch, stats = pack_trajectories(
        [make_trajectory("ok", ok), make_trajectory("bad", failed, outcome=Outcome.SANDBOX_FAILED)],
        [1.5, 9.0],
        max_tokens=8,
    )
    assert stats.dropped_trials == 1 and stats.sampled_tokens == 2 and stats.sequences == 1
    np.testing.assert_array_equal(batch.tokens, [[1, 2, 3, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(batch.segment_ids, [[1, 1, 1, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(batch.loss_mask, [[1, 1, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(batch.advantages, [[1.5, 1.5, 0, 0, 0, 0, 0, 0]])
    assert stats.as_metrics()["batch/dropped_trials"] == 1.0


def test_packed_rows_give_the_same_loss_as_one_sequence_per_row():
    rng = np.random.default_rng(0)
    trajs = []
    for i, n in enumerate((5, 3, 7, 2, 4)):
        trajs.append(
            make_trajectory(
                str(i), make_sequence(rng.integers(1, 50, n), [0] + [1] * (n - 1), rng.normal(-1, 0.2, n))
            )
        )
    adv = rng.normal(0, 1, 5).astype(np.float32)
    packed, _ = pack_trajectories(trajs, adv, max_tokens=8)
    unpacked_rows = [pack_trajectories([t], adv[i : i + 1], max_tokens=8)[0] for i, t in enumerate(trajs)]

    def fake_logprobs(batch):
        # A per-token function of (token, position), like a model whose context is its own segment.
        return -0.01 * batch.tokens - 0.05 * batch.positions - 0.1

    algo = AlgoConfig()

    def loss(batch):
        lp = fake_logprobs(batch)
        return float(
            policy_loss(
                lp,
                lp - 1e-4 * batch.targets,
                batch.behaviour_logprobs,
                batch.advantages,
                batch.loss_mask,
                batch.segment_ids,
                algo,
                norm_length=8.0,
            )[0]
        )

    stacked = {
        k: np.concatenate([getattr(b, k) for b in unpacked_rows])
        for k in (
            "tokens",
            "targets",
            "positions",
            "segment_ids",
            "loss_mask",
            "advantages",
            "behaviour_logprobs",
        )
    }
    from legorl_jax.types import TrainBatch

    unpacked = TrainBatch(routed_experts=None, **stacked)
    assert packed.tokens.shape[0] < unpacked.tokens.shape[0]
    # The same per-token terms summed in another layout: float32 noise of an order-1 loss (u = 6e-8 per add).
    assert loss(packed) == pytest.approx(loss(unpacked), abs=1e-6)


def test_a_generation_becomes_a_sequence_with_routing_at_its_input_positions():
    routed = np.arange(4 * 2 * 2).reshape(4, 2, 2) % 4  # rows for input positions 1..4 (start = 1)
    gen = Generation(
        output_ids=np.asarray([7, 8, 9]),
        output_logprobs=np.asarray([-0.1, -0.2, -0.3]),
        routed_experts=routed,
        finish_reason="stop",
        weight_version="v3",
        prompt_tokens=3,
        routed_experts_start=1,
    )
    seq = sequence_from_generation([1, 2, 3], gen)
    np.testing.assert_array_equal(seq.token_ids, [1, 2, 3, 7, 8, 9])
    np.testing.assert_array_equal(seq.loss_mask, [0, 0, 0, 1, 1, 1])
    np.testing.assert_allclose(seq.behaviour_logprobs[3:], [-0.1, -0.2, -0.3])
    assert (seq.routed_experts[0] == -1).all() and (seq.routed_experts[5] == -1).all()
    np.testing.assert_array_equal(seq.routed_experts[1:5], routed)
    trajs = trajectories_from_generations([[1, 2, 3]], [gen], [1.0], ["q0"])
    assert trajs[0].valid and trajs[0].group_id == "q0" and trajs[0].sequences[0].weight_versions == ("v3",)
    batch, _ = pack_trajectories(trajs, [1.0], max_tokens=8, routing=SPEC)
    # the logits at position 2 (token 3) predict the first sampled token 7 with its behaviour log-prob.
    assert (
        batch.targets[0, 2] == 7
        and batch.loss_mask[0, 2] == 1
        and batch.behaviour_logprobs[0, 2] == np.float32(-0.1)
    )
    np.testing.assert_array_equal(batch.routed_experts[:, 0, 2], routed[1])


@pytest.mark.parametrize(
    "routed, message",
    [
        (np.asarray([[[0, -1], [1, 2]], [[-1, -1], [-1, -1]]]), "row 0 layer 0 mixes -1"),
        (np.asarray([[[0, 4], [1, 2]], [[-1, -1], [-1, -1]]]), r"ids must lie in \[-1, 4\)"),
        (np.zeros((2, 3, 2), np.int16), r"expected \(2, 2, 2\)"),
    ],
)
def test_bad_routing_rows_are_refused_with_their_location(routed, message):
    seq = make_sequence([1, 2], [0, 1], routed=routed)
    with pytest.raises(ValueError, match=message):
        pack_trajectories([make_trajectory("x", seq)], [1.0], max_tokens=4, routing=SPEC)


def test_bad_packing_inputs_are_named():
    seq = make_sequence([1, 2], [0, 1], [0.0, float("nan")])
    with pytest.raises(ValueError, match="behaviour_logprobs at sampled position 1 is nan"):
        pack_trajectories([make_trajectory("x", seq)], [1.0], max_tokens=4)
    routed = make_sequence([1, 2], [0, 1], routed=np.zeros((2, 2, 2), np.int16))
    with pytest.raises(ValueError, match="routing=None"):
        pack_trajectories([make_trajectory("x", routed)], [1.0], max_tokens=4)
    ok = make_sequence([1, 2], [0, 1])
    with pytest.raises(ValueError, match=r"advantages has shape \(2,\)"):
        pack_trajectories([make_trajectory("x", ok)], [1.0, 2.0], max_tokens=4)
    with pytest.raises(ValueError, match="max_tokens must be an int >= 2, got 1"):
        pack_trajectories([make_trajectory("x", ok)], [1.0], max_tokens=1)


def test_token_versions_are_packed_aligned_with_the_targets_and_minus_one_where_nothing_was_sampled():
    # Per-token versions: 13 was sampled under version 4, 14 and 15 under 5 (an update landed mid-call).
    a = Sequence(
        np.asarray([11, 12, 13, 14, 15], np.int32),
        np.asarray([0, 0, 1, 1, 1], np.int8),
        np.asarray([0, 0, -0.1, -0.2, -0.3], np.float32),
        None,
        weight_versions=("step-000004", "step-000005"),
        token_versions=np.asarray([-1, -1, 4, 5, 5], np.int32),
    )
    # No per-token record: every sampled token is of its one version.
    b = Sequence(
        np.asarray([21, 22, 23], np.int32),
        np.asarray([0, 1, 1], np.int8),
        np.asarray([0, -0.5, -0.6], np.float32),
        None,
        weight_versions=("step-000002",),
    )
    # A version that is not a number of the run: packed, its versions unknown (-1).
    c = Sequence(
        np.asarray([31, 32], np.int32),
        np.asarray([0, 1], np.int8),
        np.asarray([0, -0.7], np.float32),
        None,
        weight_versions=("scripted",),
    )
    batch, _ = pack_trajectories(
        [make_trajectory("a", a), make_trajectory("b", b), make_trajectory("c", c)],
        [1.0, 1.0, 1.0],
        max_tokens=10,
    )
    np.testing.assert_array_equal(batch.tokens, [[11, 12, 13, 14, 15, 21, 22, 23, 31, 32]])
    # Position t describes target t + 1: a shift by one would put version 4 on target 14.
    np.testing.assert_array_equal(batch.token_versions, [[-1, 4, 5, 5, -1, 2, 2, -1, -1, -1]])
    assert batch.token_versions.dtype == np.int32
    half = batch.select_rows(slice(0, 1))
    np.testing.assert_array_equal(half.token_versions, batch.token_versions)


def test_a_generation_an_update_landed_in_numbers_each_output_token_by_its_version():
    gen = Generation(
        output_ids=np.asarray([7, 8, 9]),
        output_logprobs=np.asarray([-0.1, -0.2, -0.3]),
        routed_experts=None,
        finish_reason="stop",
        weight_version="step-000003",
        prompt_tokens=2,
        token_weight_versions=("default", "step-000003", "step-000003"),
    )
    seq = sequence_from_generation([1, 2], gen)
    np.testing.assert_array_equal(seq.token_versions, [-1, -1, 0, 3, 3])
    assert seq.weight_versions == ("default", "step-000003")
    assert sequence_from_generation([1, 2], gen, initial_version="base").token_versions is None
    with pytest.raises(ValueError, match="token_weight_versions has 2 entries for 3 output tokens"):
        sequence_from_generation([1, 2], Generation(
            gen.output_ids, gen.output_logprobs, None, "stop", "default", 2, token_weight_versions=("a", "b")
        ))  # fmt: skip


def test_token_versions_below_minus_one_are_refused_with_their_location():
    bad = Sequence(
        np.asarray([1, 2], np.int32),
        np.asarray([0, 1], np.int8),
        np.asarray([0, -0.1], np.float32),
        None,
        token_versions=np.asarray([-1, -2], np.int32),
    )
    with pytest.raises(ValueError, match="'x' sequence 0: token_versions must be version numbers >= -1"):
        pack_trajectories([make_trajectory("x", bad)], [1.0], max_tokens=4)
