"""Parsing unified diffs and applying them to the original lines."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    pass


@dataclass
class ParsedHunk:
    old_start: int  # as written in the header (1-based; for an empty range, the line before it)
    old_length: int
    new_start: int
    new_length: int
    lines: list[str] = field(default_factory=list)


def parse_patch(text: str) -> list[ParsedHunk]:
    hunks: list[ParsedHunk] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith(("--- ", "+++ ")) and (not hunks or _complete(hunks[-1])):
            continue
        m = _HEADER.match(line)
        if m:
            o, ol, n, nl = m.groups()
            hunks.append(ParsedHunk(int(o), int(ol or 1), int(n), int(nl or 1)))
            continue
        if not hunks:
            continue  # preamble (git headers, commit message)
        if line.startswith("\\"):
            continue  # "\ No newline at end of file"
        if line[:1] not in (" ", "-", "+") and line != "":
            raise PatchError(f"line {number}: unexpected {line!r} inside a hunk")
        hunks[-1].lines.append(line if line else " ")
    for h in hunks:
        if not _complete(h):
            raise PatchError(f"hunk @@ -{h.old_start},{h.old_length} has the wrong number of lines")
    return hunks


def _complete(h: ParsedHunk) -> bool:
    old = sum(1 for ln in h.lines if ln[0] in " -")
    new = sum(1 for ln in h.lines if ln[0] in " +")
    return old == h.old_length and new == h.new_length


def apply_patch(original: Sequence[str], patch: str) -> list[str]:
    """Applies every hunk in order; context and removed lines must match exactly."""
    result: list[str] = []
    cursor = 0  # index into original of the next line not yet copied
    for h in parse_patch(patch):
        # An empty old range names the line after which to insert; otherwise its first line.
        start = h.old_start if h.old_length == 0 else h.old_start - 1
        if start < cursor or start > len(original):
            raise PatchError(f"hunk at old line {h.old_start} is out of order or past the end")
        result.extend(original[cursor:start])
        cursor = start
        for line in h.lines:
            tag, body = line[0], line[1:]
            if tag in " -":
                if cursor >= len(original) or original[cursor] != body:
                    found = original[cursor] if cursor < len(original) else "end of file"
                    raise PatchError(f"hunk at old line {h.old_start}: expected {body!r}, found {found!r}")
                cursor += 1
                if tag == " ":
                    result.append(body)
            else:
                result.append(body)
    result.extend(original[cursor:])
    return result
