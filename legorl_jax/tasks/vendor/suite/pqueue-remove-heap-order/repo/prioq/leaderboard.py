"""Leaderboard: best scores per player, with the top N available at any time.

Built on a max-order PriorityQueue; players with equal scores rank in the order they first reached
that score.
"""

from __future__ import annotations

from collections.abc import Hashable

from prioq.queue import PriorityQueue


class Leaderboard:
    def __init__(self) -> None:
        self._queue = PriorityQueue(order="max")

    def __len__(self) -> int:
        return len(self._queue)

    def submit(self, player: Hashable, score: float) -> bool:
        """Records a score; keeps only the player's best. Returns True if it is a new best."""
        if player in self._queue:
            if score <= self._queue.priority(player):
                return False
            self._queue.update(player, score)
        else:
            self._queue.push(player, score)
        return True

    def score(self, player: Hashable) -> float:
        return self._queue.priority(player)

    def disqualify(self, player: Hashable) -> None:
        self._queue.remove(player)

    def top(self, n: int) -> list[tuple[Hashable, float]]:
        return self._queue.peek_n(n)
