"""Plane geometry: points, segments, polygons, convex hulls."""

from planar.hull import convex_hull
from planar.orientation import EPS, orient
from planar.point import Point
from planar.polygon import Polygon
from planar.segment import Segment

__all__ = ["EPS", "Point", "Polygon", "Segment", "convex_hull", "orient"]
__version__ = "0.5.1"
