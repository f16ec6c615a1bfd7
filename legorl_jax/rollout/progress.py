"""A live progress line for a batch of trials: done / running / dropped, and the reward so far.

On a terminal it rewrites one line in place (`\\r`); elsewhere (CI, a log file) it logs a line per finished
trial, so nothing depends on a terminal.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

log = logging.getLogger("legorl_jax.rollout")


class Progress:
    """Counts trials of one batch and shows them (module docstring)."""

    def __init__(self, total: int, label: str = "trials", stream: TextIO | None = None):
        self.total, self.label = total, label
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = self.running = self.dropped = 0
        self.reward_sum = 0.0

    def start(self) -> None:
        self.running += 1
        self._show()

    def finish(self, trial_id: str, outcome: str, reward: float, dropped: bool) -> None:
        self.running -= 1
        self.done += 1
        self.dropped += dropped
        if not dropped:
            self.reward_sum += reward
        if not self.tty:
            log.info(
                "%s %d/%d %s: %s reward %.2f", self.label, self.done, self.total, trial_id, outcome, reward
            )
        self._show()

    @property
    def reward_mean(self) -> float:
        kept = self.done - self.dropped
        return self.reward_sum / kept if kept else 0.0

    def line(self) -> str:
        return (
            f"{self.label} {self.done}/{self.total} | running {self.running} | dropped {self.dropped} | "
            f"reward {self.reward_mean:.3f}"
        )

    def _show(self) -> None:
        if self.tty:
            self.stream.write("\r" + self.line() + " " * 4)
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
