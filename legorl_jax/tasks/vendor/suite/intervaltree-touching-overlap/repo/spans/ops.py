"""Operations on collections of intervals: merging, coverage and free-slot search.

All functions accept any iterable of `Interval`s, in any order, and never mutate their input.
"""

from __future__ import annotations

from collections.abc import Iterable

from spans.interval import Interval


def merge_intervals(intervals: Iterable[Interval], merge_adjacent: bool = False) -> list[Interval]:
    """Sorted, non-overlapping intervals covering the same points.

    With `merge_adjacent=True`, intervals that only touch ([1, 3) and [3, 5)) are joined too.
    The merged interval keeps the data of the first interval of its group.
    """
    ordered = sorted(intervals)
    merged: list[Interval] = []
    for interval in ordered:
        if merged:
            last = merged[-1]
            if last.overlaps(interval) or (merge_adjacent and last.touches(interval)):
                merged[-1] = last.span(interval)
                continue
        merged.append(interval)
    return merged


def total_length(intervals: Iterable[Interval]):
    """Total length of the union of the intervals (overlaps counted once)."""
    pieces = merge_intervals(intervals, merge_adjacent=True)
    total = 0
    for piece in pieces:
        total += piece.length
    return total


def free_slots(busy: Iterable[Interval], window_start, window_end, min_length=None) -> list[Interval]:
    """Gaps inside [window_start, window_end) not covered by any busy interval.

    `min_length` drops gaps shorter than it. Busy intervals outside the window are ignored.
    """
    window = Interval(window_start, window_end)
    if min_length is not None and min_length <= 0:
        raise ValueError(f"min_length must be positive, got {min_length!r}")
    clipped = []
    for interval in busy:
        piece = interval.intersection(window)
        if piece is not None:
            clipped.append(piece)
    gaps: list[Interval] = []
    cursor = window_start
    for piece in merge_intervals(clipped, merge_adjacent=True):
        if piece.start > cursor:
            gaps.append(Interval(cursor, piece.start))
        cursor = max(cursor, piece.end)
    if cursor < window_end:
        gaps.append(Interval(cursor, window_end))
    if min_length is not None:
        gaps = [gap for gap in gaps if gap.length >= min_length]
    return gaps
