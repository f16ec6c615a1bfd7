"""Weighted graphs and shortest routes."""

from routes.dijkstra import reachable_within, shortest_path, shortest_paths
from routes.errors import NoPath
from routes.graph import WeightedGraph
from routes.network import parse_network
from routes.path import Path

__all__ = ["NoPath", "Path", "WeightedGraph", "parse_network", "reachable_within", "shortest_path",
           "shortest_paths"]
__version__ = "0.8.0"
