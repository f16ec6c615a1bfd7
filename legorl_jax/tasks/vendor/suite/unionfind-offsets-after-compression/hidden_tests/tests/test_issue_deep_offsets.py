import itertools
import random

import pytest

from linkage import InconsistentOffset, RelativeOffsets

TRUE = {f"s{i}": float(p) for i, p in enumerate([0, 7, -3, 12, 5, -8, 21, 2])}


def relate(offsets, a, b):
    offsets.relate(a, b, TRUE[a] - TRUE[b])


def merged_pairwise():
    offsets = RelativeOffsets()
    for a, b in [("s0", "s1"), ("s2", "s3"), ("s4", "s5"), ("s6", "s7"),
                 ("s0", "s2"), ("s4", "s6"), ("s0", "s4")]:
        relate(offsets, a, b)
    return offsets


def test_differences_are_right_after_merging_groups_of_groups():
    offsets = merged_pairwise()
    # Deepest members first, before other queries flatten their paths.
    for a, b in itertools.permutations(reversed(TRUE), 2):
        assert offsets.difference(a, b) == pytest.approx(TRUE[a] - TRUE[b]), (a, b)


def test_consistent_measurement_is_not_rejected_after_merges():
    offsets = merged_pairwise()
    relate(offsets, "s7", "s3")
    relate(offsets, "s0", "s5")
    assert offsets.difference("s7", "s3") == pytest.approx(TRUE["s7"] - TRUE["s3"])


def test_positions_relative_to_an_anchor():
    offsets = merged_pairwise()
    positions = offsets.positions("s7")
    assert positions == pytest.approx({name: p - TRUE["s7"] for name, p in TRUE.items()})


def test_random_measurements_match_ground_truth():
    rng = random.Random(2024)
    truth = {n: rng.uniform(-100, 100) for n in range(60)}
    offsets = RelativeOffsets(tolerance=1e-6)
    for _ in range(120):
        a, b = rng.sample(range(60), 2)
        offsets.relate(a, b, truth[a] - truth[b])
        c, d = rng.sample(range(60), 2)
        diff = offsets.difference(c, d)
        if diff is not None:
            assert diff == pytest.approx(truth[c] - truth[d], abs=1e-6)


def test_contradictions_still_detected_in_deep_sets():
    offsets = merged_pairwise()
    with pytest.raises(InconsistentOffset):
        offsets.relate("s2", "s6", 1000.0)


def linked_in_three_rounds():
    # Pairs, then pairs of pairs, then the two halves: the last member joined sits three links from the root.
    offsets = RelativeOffsets()
    for a, b, delta in [("p1", "p2", 2.5), ("p3", "p4", -1.25), ("p5", "p6", 4.0), ("p7", "p8", 0.75),
                        ("p1", "p3", 6.5), ("p5", "p7", -3.0), ("p1", "p5", 11.0)]:
        offsets.relate(a, b, delta)
    return offsets


def test_deepest_member_against_a_member_of_the_other_half():
    assert linked_in_three_rounds().difference("p8", "p4") == -3.5


def test_a_shallow_member_against_the_deepest_one():
    assert linked_in_three_rounds().difference("p2", "p8") == 6.25


def test_deepest_member_against_the_first_pair_of_the_other_half():
    assert linked_in_three_rounds().difference("p8", "p3") == -2.25
