"""Unified diff text (diff -u) from two line lists."""

from __future__ import annotations

from collections.abc import Sequence

from linediff.edits import opcodes
from linediff.hunks import Hunk, group_hunks


def _range(start: int, length: int) -> str:
    """GNU style: 1-based start, ',length' omitted when it is 1."""
    first = start + 1
    if length == 1:
        return f"{first}"
    return f"{first},{length}"


def format_hunk(hunk: Hunk, a: Sequence[str], b: Sequence[str]) -> list[str]:
    lines = [f"@@ -{_range(hunk.old_start, hunk.old_length)} +{_range(hunk.new_start, hunk.new_length)} @@"]
    for op in hunk.ops:
        if op.tag == "equal":
            lines += [" " + line for line in a[op.i1 : op.i2]]
            continue
        lines += ["-" + line for line in a[op.i1 : op.i2]]
        lines += ["+" + line for line in b[op.j1 : op.j2]]
    return lines


def unified_diff(
    a: Sequence[str],
    b: Sequence[str],
    fromfile: str = "a",
    tofile: str = "b",
    context: int = 3,
) -> list[str]:
    """Lines of a unified diff (without line terminators); empty when the inputs are equal."""
    for name, seq in (("a", a), ("b", b)):
        if isinstance(seq, str):
            raise TypeError(f"{name} must be a sequence of lines, not a str (use str.splitlines())")
    hunks = group_hunks(opcodes(a, b), context)
    if not hunks:
        return []
    out = [f"--- {fromfile}", f"+++ {tofile}"]
    for hunk in hunks:
        out += format_hunk(hunk, a, b)
    return out
