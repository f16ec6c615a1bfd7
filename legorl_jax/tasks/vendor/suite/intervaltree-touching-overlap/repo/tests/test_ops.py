from spans import Interval, free_slots, merge_intervals, total_length


def test_merge_joins_overlapping_intervals():
    merged = merge_intervals([Interval(5, 8), Interval(1, 3), Interval(2, 6)])
    assert merged == [Interval(1, 8)]


def test_merge_adjacent_joins_touching_intervals():
    merged = merge_intervals([Interval(1, 3), Interval(3, 5), Interval(7, 9)], merge_adjacent=True)
    assert merged == [Interval(1, 5), Interval(7, 9)]


def test_total_length_counts_overlap_once():
    assert total_length([Interval(0, 10), Interval(5, 15), Interval(20, 21)]) == 16


def test_free_slots_inside_window():
    busy = [Interval(9, 10), Interval(13, 15), Interval(14, 16), Interval(3, 4)]
    assert free_slots(busy, 8, 17) == [Interval(8, 9), Interval(10, 13), Interval(16, 17)]


def test_free_slots_drops_short_gaps():
    busy = [Interval(9, 10), Interval(10.25, 12)]
    assert free_slots(busy, 9, 13, min_length=0.5) == [Interval(12, 13)]
