"""LogTail: the last N complete lines of a text stream fed in arbitrary chunks.

A chunk may end in the middle of a line; that partial line is held back until its newline arrives
(or `flush()` is called), so `last()` never returns half a line.
"""

from __future__ import annotations

import re

from ringlog.buffer import RingBuffer


class LogTail:
    def __init__(self, lines: int = 100) -> None:
        self._lines = RingBuffer(lines)
        self._partial = ""
        self.total_lines = 0

    def feed(self, chunk: str) -> None:
        if not isinstance(chunk, str):
            raise TypeError(f"LogTail.feed expects str, got {type(chunk).__name__}")
        text = self._partial + chunk
        *complete, self._partial = text.split("\n")
        for line in complete:
            self._push(line.rstrip("\r"))

    def flush(self) -> None:
        if self._partial:
            self._push(self._partial.rstrip("\r"))
            self._partial = ""

    def _push(self, line: str) -> None:
        self._lines.append(line)
        self.total_lines += 1

    def last(self, n: int | None = None) -> list[str]:
        if n is None:
            return self._lines.to_list()
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        if n == 0:
            return []
        return self._lines[-n:]

    def grep(self, pattern: str, flags: int = 0) -> list[str]:
        regex = re.compile(pattern, flags)
        return [line for line in self._lines if regex.search(line)]
