"""Recomposing components into a string (RFC 3986 5.3)."""

from __future__ import annotations

from urlkit.parse import URL


def compose(url: URL) -> str:
    parts: list[str] = []
    if url.scheme is not None:
        parts.append(url.scheme + ":")
    if url.authority is not None:
        parts.append("//" + url.authority)
    parts.append(url.path)
    if url.query is not None:
        parts.append("?" + url.query)
    if url.fragment is not None:
        parts.append("#" + url.fragment)
    return "".join(parts)
