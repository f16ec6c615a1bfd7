"""Justification and centring of already-wrapped lines."""

from __future__ import annotations

from wrapwell.width import display_width
from wrapwell.wrap import wrap


def justify_line(line: str, width: int) -> str:
    """Spreads the gaps between words so the line is exactly width columns; extra spaces go left first."""
    words = line.split()
    if len(words) < 2:
        return line
    gaps = len(words) - 1
    spare = width - sum(display_width(w) for w in words)
    if spare < gaps:
        return line
    base, extra = divmod(spare, gaps)
    out = []
    for i, word in enumerate(words[:-1]):
        out.append(word + " " * (base + (1 if i < extra else 0)))
    out.append(words[-1])
    return "".join(out)


def justify(text: str, width: int = 70) -> str:
    """Wraps then fully justifies every line but the last, which stays ragged."""
    lines = wrap(text, width)
    return "\n".join([justify_line(line, width) for line in lines[:-1]] + lines[-1:])


def center(line: str, width: int, fillchar: str = " ") -> str:
    """Centres by display width; an odd leftover column goes to the right."""
    if len(fillchar) != 1:
        raise ValueError(f"fillchar must be one character, got {fillchar!r}")
    spare = width - display_width(line)
    if spare <= 0:
        return line
    left = spare // 2
    return fillchar * left + line + fillchar * (spare - left)
