"""Greedy line filling: the core of wrap() and fill()."""

from __future__ import annotations

from wrapwell.width import display_width
from wrapwell.words import break_word, split_words


def wrap(
    text: str,
    width: int = 70,
    initial_indent: str = "",
    subsequent_indent: str = "",
    break_long_words: bool = True,
) -> list[str]:
    """Wraps text into lines of at most `width` display columns, indents included.

    Words are packed greedily with one space between them. A word wider than the space available on
    an empty line is broken (at a hyphen where possible) unless break_long_words is False, in which
    case it sits alone on an over-long line.
    """
    if not isinstance(width, int) or isinstance(width, bool):
        raise TypeError(f"width must be an int, got {width!r}")
    for name, ind in (("initial_indent", initial_indent), ("subsequent_indent", subsequent_indent)):
        if display_width(ind) >= width:
            raise ValueError(f"{name} {ind!r} leaves no room in width {width}")
    words = split_words(text)
    lines: list[str] = []
    current: list[str] = []
    current_width = 0

    def indent_now() -> str:
        return initial_indent if not lines else subsequent_indent

    def flush() -> None:
        nonlocal current, current_width
        lines.append(indent_now() + " ".join(current))
        current, current_width = [], 0

    queue = list(reversed(words))
    while queue:
        word = queue.pop()
        avail = width - display_width(indent_now())
        w = display_width(word)
        if not current:
            if w > avail and break_long_words:
                first, *rest = break_word(word, avail)
                queue.extend(reversed(rest))
                word, w = first, display_width(first)
            current, current_width = [word], w
            continue
        if current_width + 1 + w < avail:
            current.append(word)
            current_width += 1 + w
        else:
            flush()
            queue.append(word)
    if current:
        flush()
    return lines


def fill(text: str, width: int = 70, **kwargs: object) -> str:
    """wrap() joined with newlines; paragraphs (blank-line separated) are wrapped separately."""
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    return "\n\n".join("\n".join(wrap(p, width, **kwargs)) for p in paragraphs)
