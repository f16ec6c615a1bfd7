import pytest

from planar import Point, Polygon, convex_hull


def poly(*coords):
    return Polygon([Point(x, y) for x, y in coords])


SQUARE = poly((0, 0), (4, 0), (4, 4), (0, 4))


def test_area_perimeter_orientation():
    assert SQUARE.area == 16 and SQUARE.perimeter == 16
    assert not SQUARE.is_clockwise()
    assert poly((0, 0), (0, 4), (4, 4), (4, 0)).is_clockwise()
    assert poly((0, 0), (4, 0), (0, 3)).area == 6


def test_containment_with_boundary_inside():
    assert SQUARE.contains(Point(2, 2))
    assert SQUARE.contains(Point(4, 2))
    assert SQUARE.contains(Point(0, 0))
    assert not SQUARE.contains(Point(5, 2))
    l_shape = poly((0, 0), (4, 0), (4, 1), (1, 1), (1, 4), (0, 4))
    assert l_shape.contains(Point(0.5, 3))
    assert not l_shape.contains(Point(3, 3))


def test_centroid():
    assert SQUARE.centroid() == Point(2.0, 2.0)
    assert poly((0, 0), (6, 0), (0, 6)).centroid() == Point(2.0, 2.0)


def test_simple_and_self_crossing_polygons():
    assert SQUARE.is_simple()
    bowtie = poly((0, 0), (4, 4), (4, 0), (0, 4))
    assert not bowtie.is_simple()


def test_convex_hull_drops_interior_and_collinear_points():
    points = [Point(0, 0), Point(2, 1), Point(4, 0), Point(2, 3), Point(2, 0), Point(4, 0)]
    assert convex_hull(points) == [Point(0, 0), Point(4, 0), Point(2, 3)]


def test_polygon_validation():
    with pytest.raises(ValueError, match="3 vertices"):
        poly((0, 0), (1, 1))
