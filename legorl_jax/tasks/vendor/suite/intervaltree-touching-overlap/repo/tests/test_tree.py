import pytest

from spans import Interval, IntervalTree


def sample_tree():
    return IntervalTree([
        Interval(1, 4, "a"), Interval(2, 6, "b"), Interval(8, 12, "c"),
        Interval(10, 11, "d"), Interval(15, 20, "e"),
    ])


def test_iteration_is_sorted_by_start_then_end():
    tree = IntervalTree([Interval(5, 9), Interval(1, 3), Interval(5, 6), Interval(2, 10)])
    assert [(iv.start, iv.end) for iv in tree] == [(1, 3), (2, 10), (5, 6), (5, 9)]
    assert len(tree) == 4


def test_point_query_returns_containing_intervals():
    tree = sample_tree()
    assert [iv.data for iv in tree.at(3)] == ["a", "b"]
    assert [iv.data for iv in tree.at(10.5)] == ["c", "d"]
    assert tree.at(7) == []


def test_range_query_finds_partial_overlaps():
    tree = sample_tree()
    assert [iv.data for iv in tree.overlapping(5, 9)] == ["b", "c"]
    assert [iv.data for iv in tree.overlapping(0, 100)] == ["a", "b", "c", "d", "e"]
    assert tree.overlapping(13, 14) == []


def test_enveloped_by_requires_full_containment():
    tree = sample_tree()
    assert [iv.data for iv in tree.enveloped_by(7, 13)] == ["c", "d"]


def test_remove_deletes_one_matching_interval():
    tree = sample_tree()
    tree.add(Interval(8, 12, "c2"))
    tree.remove(Interval(8, 12, "c"))
    assert [iv.data for iv in tree.at(9)] == ["c2"]
    assert len(tree) == 5
    with pytest.raises(KeyError):
        tree.remove(Interval(8, 12, "c"))
    assert not tree.discard(Interval(100, 200))


def test_tree_stays_balanced_for_sorted_inserts():
    tree = IntervalTree(Interval(i, i + 3) for i in range(1000))
    assert tree.height() <= 15
    assert len(tree.at(500.5)) == 3


def test_extent_covers_everything():
    tree = sample_tree()
    assert tree.extent() == Interval(1, 20)
    assert IntervalTree().extent() is None


def test_only_intervals_can_be_added():
    with pytest.raises(TypeError, match="tuple"):
        IntervalTree().add((1, 2))
