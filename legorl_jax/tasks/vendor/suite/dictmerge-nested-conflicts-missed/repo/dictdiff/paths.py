"""JSON Pointer paths (RFC 6901): "/a/b" <-> ["a", "b"].

Escaping order matters: "~" must become "~0" before "/" becomes "~1" (and the reverse when
unescaping), otherwise "/" -> "~1" -> "~01" on the way in.
"""

from __future__ import annotations

from collections.abc import Iterable


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def join(parts: Iterable[str]) -> str:
    out = []
    for part in parts:
        if not isinstance(part, str):
            raise TypeError(f"path components must be str, got {part!r}")
        out.append("/" + escape(part))
    return "".join(out)


def split(path: str) -> list[str]:
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, got {type(path).__name__}")
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"path must be empty or start with '/', got {path!r}")
    return [unescape(token) for token in path[1:].split("/")]


def parent(path: str) -> str:
    parts = split(path)
    if not parts:
        raise ValueError("the root path has no parent")
    return join(parts[:-1])
