"""Addressable priority queues."""

from prioq.errors import DuplicateItemError, EmptyQueueError
from prioq.heap import IndexedHeap
from prioq.leaderboard import Leaderboard
from prioq.queue import PriorityQueue

__all__ = ["DuplicateItemError", "EmptyQueueError", "IndexedHeap", "Leaderboard", "PriorityQueue"]
__version__ = "2.0.1"
