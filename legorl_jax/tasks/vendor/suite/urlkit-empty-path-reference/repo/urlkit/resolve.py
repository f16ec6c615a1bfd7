"""Resolving a reference against a base URL (RFC 3986 section 5.2.2, strict parser)."""

from __future__ import annotations

from urlkit.compose import compose
from urlkit.dots import merge_paths, remove_dot_segments
from urlkit.parse import URL, URLError, parse_url


def resolve_url(base: URL, ref: URL) -> URL:
    if base.scheme is None:
        raise URLError(f"base URL must be absolute, got {compose(base)!r}")
    if ref.scheme is not None:
        return URL(ref.scheme, ref.authority, remove_dot_segments(ref.path), ref.query, ref.fragment)
    if ref.authority is not None:
        return URL(base.scheme, ref.authority, remove_dot_segments(ref.path), ref.query, ref.fragment)
    if ref.path.startswith("/"):
        path = remove_dot_segments(ref.path)
    else:
        path = remove_dot_segments(merge_paths(base.authority, base.path, ref.path))
    return URL(base.scheme, base.authority, path, ref.query, ref.fragment)


def resolve(base: str, ref: str) -> str:
    return compose(resolve_url(parse_url(base), parse_url(ref)))
