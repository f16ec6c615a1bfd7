from planar import Point, Polygon, Segment


def seg(x1, y1, x2, y2):
    return Segment(Point(x1, y1), Point(x2, y2))


def test_overlapping_collinear_segments_intersect():
    a, b = seg(0, 0, 4, 0), seg(2, 0, 6, 0)
    assert a.intersects(b) and b.intersects(a)
    assert a.intersection(b) == Segment(Point(2, 0), Point(4, 0))


def test_segment_inside_another_on_a_diagonal():
    outer, inner = seg(0, 0, 6, 6), seg(4, 4, 2, 2)
    assert outer.intersects(inner)
    shared = outer.intersection(inner)
    assert isinstance(shared, Segment)
    assert {shared.a, shared.b} == {Point(2, 2), Point(4, 4)}


def test_collinear_segments_touching_end_to_end():
    a, b = seg(0, 0, 1, 0), seg(1, 0, 3, 0)
    assert a.intersects(b)
    assert a.intersection(b) == Point(1, 0)
    assert seg(0, 0, 0, 2).intersects(seg(0, 5, 0, 2))


def test_collinear_but_separate_segments_still_do_not_intersect():
    assert not seg(0, 0, 1, 0).intersects(seg(1.5, 0, 3, 0))
    assert seg(0, 0, 1, 1).intersection(seg(2, 2, 3, 3)) is None


def test_polygon_whose_edges_double_back_is_not_simple():
    flat = Polygon([Point(0, 0), Point(4, 0), Point(2, 0)])
    assert not flat.is_simple()
