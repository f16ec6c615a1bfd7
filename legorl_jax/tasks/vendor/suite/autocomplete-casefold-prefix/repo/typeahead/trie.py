"""A character trie mapping string keys to values.

`items(prefix)` walks the subtree under a prefix in lexicographic key order. Removing a key prunes
the nodes that no longer lead to any key, so `has_prefix` stays exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_MISSING = object()


class _Node:
    __slots__ = ("children", "value")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.value: Any = _MISSING


class Trie:
    def __init__(self) -> None:
        self._root = _Node()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        node = self._find(key)
        return node is not None and node.value is not _MISSING

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"trie keys must be str, got {type(key).__name__}")
        node = self._root
        for char in key:
            node = node.children.setdefault(char, _Node())
        if node.value is _MISSING:
            self._size += 1
        node.value = value

    def __getitem__(self, key: str) -> Any:
        node = self._find(key)
        if node is None or node.value is _MISSING:
            raise KeyError(key)
        return node.value

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __delitem__(self, key: str) -> None:
        path: list[tuple[_Node, str]] = []
        node = self._root
        for char in key:
            child = node.children.get(char)
            if child is None:
                raise KeyError(key)
            path.append((node, char))
            node = child
        if node.value is _MISSING:
            raise KeyError(key)
        node.value = _MISSING
        self._size -= 1
        for parent, char in reversed(path):
            child = parent.children[char]
            if child.children or child.value is not _MISSING:
                break
            del parent.children[char]

    def has_prefix(self, prefix: str) -> bool:
        return self._find(prefix) is not None

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        node = self._find(prefix)
        if node is None:
            return
        stack: list[tuple[str, _Node]] = [(prefix, node)]
        while stack:
            key, node = stack.pop()
            if node.value is not _MISSING:
                yield key, node.value
            for char in sorted(node.children, reverse=True):
                stack.append((key + char, node.children[char]))

    def longest_prefix_of(self, text: str) -> str | None:
        """The longest stored key that is a prefix of `text`."""
        node, best = self._root, None
        if node.value is not _MISSING:
            best = ""
        for i, char in enumerate(text):
            node = node.children.get(char)
            if node is None:
                break
            if node.value is not _MISSING:
                best = text[: i + 1]
        return best

    def _find(self, key: str) -> _Node | None:
        node = self._root
        for char in key:
            node = node.children.get(char)
            if node is None:
                return None
        return node
