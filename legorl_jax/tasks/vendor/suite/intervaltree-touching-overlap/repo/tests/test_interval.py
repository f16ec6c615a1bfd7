import pytest

from spans import Interval


def test_interval_contains_its_start_but_not_its_end():
    iv = Interval(9, 10)
    assert iv.contains_point(9)
    assert iv.contains_point(9.99)
    assert not iv.contains_point(10)


def test_empty_or_reversed_interval_is_rejected():
    with pytest.raises(ValueError, match=r"\[5, 5\)"):
        Interval(5, 5)
    with pytest.raises(ValueError):
        Interval(6, 2)


def test_incomparable_endpoints_are_rejected():
    with pytest.raises(TypeError, match="comparable"):
        Interval("a", 3)


def test_intersection_and_span():
    a, b = Interval(1, 5, "a"), Interval(3, 8, "b")
    assert a.intersection(b) == Interval(3, 5)
    assert a.span(b) == Interval(1, 8)
    assert Interval(1, 2).intersection(Interval(4, 6)) is None


def test_overlapping_intervals_are_detected_both_ways():
    a, b = Interval(1, 5), Interval(4, 8)
    assert a.overlaps(b) and b.overlaps(a)
    assert Interval(0, 10).overlaps(Interval(3, 4))
    assert not Interval(0, 1).overlaps(Interval(2, 3))
