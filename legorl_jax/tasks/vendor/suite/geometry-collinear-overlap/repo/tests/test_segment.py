import pytest

from planar import Point, Segment


def seg(x1, y1, x2, y2):
    return Segment(Point(x1, y1), Point(x2, y2))


def test_crossing_segments_meet_at_a_point():
    a, b = seg(0, 0, 4, 4), seg(0, 4, 4, 0)
    assert a.intersects(b) and b.intersects(a)
    assert a.intersection(b) == Point(2.0, 2.0)


def test_t_junction_touches():
    stem, bar = seg(2, 0, 2, 2), seg(0, 2, 4, 2)
    assert stem.intersects(bar)
    assert stem.intersection(bar) == Point(2.0, 2.0)


def test_parallel_and_disjoint_segments():
    assert not seg(0, 0, 4, 0).intersects(seg(0, 1, 4, 1))
    assert not seg(0, 0, 1, 1).intersects(seg(3, 0, 2, 1))
    assert seg(0, 0, 1, 0).intersection(seg(0, 1, 1, 1)) is None


def test_collinear_but_separate_segments_do_not_intersect():
    assert not seg(0, 0, 1, 0).intersects(seg(2, 0, 3, 0))


def test_point_on_segment():
    s = seg(0, 0, 4, 2)
    assert s.contains_point(Point(2, 1))
    assert s.contains_point(Point(4, 2))
    assert not s.contains_point(Point(6, 3))
    assert s.midpoint == Point(2.0, 1.0)
    assert s.length == pytest.approx(20 ** 0.5)


def test_invalid_segments():
    with pytest.raises(ValueError, match="distinct"):
        seg(1, 1, 1, 1)
    with pytest.raises(TypeError):
        Segment((0, 0), (1, 1))
    with pytest.raises(ValueError, match="inf"):
        Point(float("inf"), 0)
