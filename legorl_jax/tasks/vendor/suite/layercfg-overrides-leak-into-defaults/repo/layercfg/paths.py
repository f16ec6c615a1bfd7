"""Dotted-path access into nested dicts ('server.port')."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layercfg.errors import ConfigError

_MISSING = object()


def split_path(path: str) -> list[str]:
    parts = path.split(".")
    if not path or any(not p.strip() or p != p.strip() for p in parts):
        raise ConfigError(f"invalid key path {path!r}")
    return parts


def get_path(tree: Mapping[str, Any], path: str, default: Any = _MISSING) -> Any:
    node: Any = tree
    for part in split_path(path):
        if not isinstance(node, Mapping) or part not in node:
            if default is _MISSING:
                raise KeyError(path)
            return default
        node = node[part]
    return node


def set_path(tree: dict[str, Any], path: str, value: Any, append: bool = False) -> None:
    """Sets (or, with append=True, appends to the list at) path, creating intermediate dicts in place."""
    parts = split_path(path)
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {path!r}: {'.'.join(parts[: i + 1])!r} is not a table")
        node = child
    leaf = parts[-1]
    if append:
        current = node.setdefault(leaf, [])
        if not isinstance(current, list):
            raise ConfigError(f"cannot append to {path!r}: it holds {type(current).__name__}, not a list")
        current.extend(value if isinstance(value, list) else [value])
    else:
        node[leaf] = value
