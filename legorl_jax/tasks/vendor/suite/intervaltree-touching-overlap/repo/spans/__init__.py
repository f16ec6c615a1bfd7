"""Half-open intervals and an augmented AVL interval tree."""

from spans.interval import Interval
from spans.ops import free_slots, merge_intervals, total_length
from spans.tree import IntervalTree

__all__ = ["Interval", "IntervalTree", "free_slots", "merge_intervals", "total_length"]
__version__ = "0.4.2"
