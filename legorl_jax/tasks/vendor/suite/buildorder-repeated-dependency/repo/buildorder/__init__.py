"""Dependency graphs and build orders."""

from buildorder.cycles import CycleError, find_cycle
from buildorder.graph import DependencyGraph
from buildorder.order import build_stages, topological_order
from buildorder.plan import parse_rules, plan

__all__ = ["CycleError", "DependencyGraph", "build_stages", "find_cycle", "parse_rules", "plan",
           "topological_order"]
__version__ = "0.7.2"
