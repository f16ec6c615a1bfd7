"""Union-find and its applications."""

from linkage.dsu import DisjointSet
from linkage.groups import group_by_shared
from linkage.offsets import InconsistentOffset, RelativeOffsets
from linkage.spanning import minimum_spanning_forest

__all__ = ["DisjointSet", "InconsistentOffset", "RelativeOffsets", "group_by_shared",
           "minimum_spanning_forest"]
__version__ = "0.4.0"
