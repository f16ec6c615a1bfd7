"""Bracket nesting, as Rails and PHP write it: a[b]=1&a[c][]=2 -> {'a': {'b': '1', 'c': ['2']}}."""

from __future__ import annotations

import re

from qsparse.errors import QueryError
from qsparse.parse import parse_pairs

_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")
_PART = re.compile(r"\[([^\[\]]*)\]")


def _split_key(key: str) -> list[str]:
    m = _KEY.match(key)
    if not m:
        raise QueryError(f"malformed nested key {key!r}")
    return [m.group(1)] + _PART.findall(m.group(2))


def parse_nested(query: str, max_depth: int = 5, **options: object) -> dict[str, object]:
    """An empty bracket pair appends to a list; a named one descends into a dict."""
    root: dict[str, object] = {}
    for key, value in parse_pairs(query, **options):
        parts = _split_key(key)
        if len(parts) > max_depth + 1:
            raise QueryError(f"key {key!r} nests deeper than max_depth={max_depth}")
        node: dict[str, object] = root
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            following = None if last else parts[depth + 1]
            if last:
                _assign(node, part, value, key)
                break
            child = node.get(part)
            if following == "":
                if child is None:
                    child = node[part] = []
                if not isinstance(child, list):
                    raise QueryError(f"key {key!r} mixes a list with a scalar or dict")
                child.append(value)
                if depth + 2 != len(parts):
                    raise QueryError(f"'[]' must be the last part of {key!r}")
                break
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise QueryError(f"key {key!r} mixes a dict with a scalar or list")
            node = child
    return root


def _assign(node: dict[str, object], part: str, value: str, key: str) -> None:
    if part == "":
        raise QueryError(f"empty key in {key!r}")
    if isinstance(node.get(part), (dict, list)):
        raise QueryError(f"key {key!r} overwrites a nested value")
    node[part] = value
