"""How deep a request body may nest, and the name of the field that nests deeper.

    deepest_field(body, limit)      # a parsed body: the path of the first value below `limit` levels, or None
    deepest_field_in_text(raw, limit)  # the same on text the JSON parser refused for its own depth limit

Every part of a request is parsed (orjson: 1,024 levels), hashed and serialised (the retry key and the
archive: orjson's encoder stops at 254 levels, and the chat template renders tools with the stdlib's
recursive encoder), so one limit well under those, checked once on the whole body, keeps all of them from
failing as a 500 deep inside a handler. A path reads as the client wrote the body:
`tools[0].function.parameters.properties.a.properties`; depth 1 is the body object itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Strings (with their escapes) and the structural characters; numbers and literals carry no nesting.
_TOKEN_RE = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.DOTALL)
_COLON_RE = re.compile(rb"\s*:")
SCAN_BUDGET = 50_000  # tokens: about 0.05 s of scanning on a quiet host


def deepest_field(body: Any, limit: int) -> str | None:
    """The path of the first value (in document order) that sits deeper than `limit` levels, or None."""
    # Only containers are visited, and a path is spelled only for the one reported: this runs on every
    # model call, at about the cost of orjson's parse of the same body (a 290 kB, 200-message conversation).
    stack: list[tuple[Any, int, Any]] = [(body, 1, None)]  # (container, depth, (parent trail, key))
    while stack:
        value, depth, trail = stack.pop()
        if depth > limit:
            return _trail_text(trail)
        items = value.items() if type(value) is dict else enumerate(value)
        children = [(v, depth + 1, (trail, k)) for k, v in items if type(v) is dict or type(v) is list]
        if children:
            children.reverse()
            stack.extend(children)
    return None


def _trail_text(trail: Any) -> str:
    keys: list[Any] = []
    while trail is not None:
        trail, key = trail
        keys.append(key)
    return _path_text(keys[::-1])


def deepest_field_in_text(raw: bytes, limit: int, budget: int = SCAN_BUDGET) -> str | None:
    """`deepest_field` on JSON text too deep for the parser: a scan of its brackets, keys and commas.

    The scan is Python, so it gives up after `budget` tokens and names the whole `body` instead: a body
    can hold millions of commas before its deep part, and the answer is a 400 either way."""
    frames: list[list[Any]] = []  # [kind, current key or index] per open container, outermost first
    for n, m in enumerate(_TOKEN_RE.finditer(raw)):
        if n >= budget:
            return "body"
        token = m.group()
        top = frames[-1] if frames else None
        if token in (b"{", b"["):
            if len(frames) + 1 > limit:
                return _path_text([f[1] for f in frames])
            frames.append(["obj" if token == b"{" else "arr", None if token == b"{" else 0])
        elif token in (b"}", b"]"):
            if frames:
                frames.pop()
        elif token == b",":
            if top is not None and top[0] == "arr":
                top[1] += 1
        elif token != b":" and top is not None and top[0] == "obj" and _COLON_RE.match(raw, m.end()):
            try:
                top[1] = json.loads(token)
            except ValueError:
                top[1] = token.decode("utf-8", "replace")[1:-1]
    return None


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _path_text(parts: list[str | int]) -> str:
    text = ""
    for part in parts:
        text = _join(text, part)
    return text or "body"
