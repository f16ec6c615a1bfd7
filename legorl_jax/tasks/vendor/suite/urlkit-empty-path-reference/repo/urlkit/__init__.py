"""urlkit: RFC 3986 URLs."""

from urlkit.compose import compose
from urlkit.dots import merge_paths, remove_dot_segments
from urlkit.normalize import normalize
from urlkit.parse import URL, URLError, parse_url
from urlkit.resolve import resolve, resolve_url

__all__ = [
    "URL",
    "URLError",
    "compose",
    "merge_paths",
    "normalize",
    "parse_url",
    "remove_dot_segments",
    "resolve",
    "resolve_url",
]
