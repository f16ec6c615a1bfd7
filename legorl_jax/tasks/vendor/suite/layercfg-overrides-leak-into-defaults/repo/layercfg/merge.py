"""Deep merging of nested mappings, the core of layering."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: override's keys win; where both sides hold a mapping, they are merged recursively.

    Lists are replaced, not concatenated (use the '+=' override to append).
    """
    merged = dict(base)
    for key, value in override.items():
        if key in merged and isinstance(merged[key], Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def merge_layers(layers: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for layer in layers:
        result = deep_merge(result, layer)
    return result


def leaf_paths(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of every non-mapping value, in insertion order."""
    out: list[str] = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out += leaf_paths(value, path + ".")
        else:
            out.append(path)
    return out
