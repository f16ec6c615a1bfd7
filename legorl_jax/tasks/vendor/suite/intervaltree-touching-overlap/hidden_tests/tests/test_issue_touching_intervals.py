from spans import Interval, IntervalTree, merge_intervals


def test_back_to_back_intervals_do_not_overlap():
    assert not Interval(9, 10).overlaps(Interval(10, 11))
    assert not Interval(10, 11).overlaps(Interval(9, 10))
    assert not Interval(1.5, 2.5).overlaps(Interval(2.5, 3))


def test_range_query_excludes_intervals_that_only_touch_the_query():
    tree = IntervalTree([Interval(9, 10, "standup"), Interval(10, 11, "1:1"), Interval(11, 12, "lunch")])
    assert [iv.data for iv in tree.overlapping(10, 11)] == ["1:1"]
    assert [iv.data for iv in tree.overlapping(12, 13)] == []
    assert [iv.data for iv in tree.overlapping(8, 9)] == []


def test_merge_keeps_touching_intervals_apart_unless_asked():
    intervals = [Interval(1, 3, "x"), Interval(3, 5, "y"), Interval(4, 6, "z")]
    assert merge_intervals(intervals[:2]) == [Interval(1, 3), Interval(3, 5)]
    assert merge_intervals(intervals) == [Interval(1, 3), Interval(3, 6)]
    assert merge_intervals(intervals, merge_adjacent=True) == [Interval(1, 6)]


def test_genuine_overlaps_are_still_reported():
    tree = IntervalTree([Interval(9, 10, "standup"), Interval(10, 11, "1:1")])
    assert [iv.data for iv in tree.overlapping(9.5, 10.5)] == ["standup", "1:1"]
    assert Interval(1, 5).overlaps(Interval(4.999, 6))
