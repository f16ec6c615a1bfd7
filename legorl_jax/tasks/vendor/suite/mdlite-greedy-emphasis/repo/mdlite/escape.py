"""HTML escaping for text content and attribute values."""

from __future__ import annotations

_TEXT = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape_text(text: str) -> str:
    return "".join(_TEXT.get(ch, ch) for ch in text)


def escape_attr_quotes(text: str) -> str:
    """For values that already went through escape_text: only the quote is left to escape."""
    return text.replace('"', "&quot;")


def escape_attr(text: str) -> str:
    return escape_attr_quotes(escape_text(text))
