"""Built-in filters. Each takes the value first, then the filter's arguments."""

from __future__ import annotations

import html
from collections.abc import Callable

from stencil.undefined import Undefined


def default(value: object, fallback: object = "", boolean: bool = False) -> object:
    """The fallback for undefined values (and, with boolean=True, for any false value)."""
    if isinstance(value, Undefined) or (boolean and not value):
        return fallback
    return value


def truncate(value: object, length: int = 80, end: str = "...") -> str:
    text = str(value)
    if len(text) <= length:
        return text
    return text[: max(0, length - len(end))].rstrip() + end


def join(value: object, separator: str = "") -> str:
    return separator.join(str(v) for v in value)  # type: ignore[union-attr]


BUILTIN_FILTERS: dict[str, Callable[..., object]] = {
    "default": default,
    "d": default,
    "upper": lambda v: str(v).upper(),
    "lower": lambda v: str(v).lower(),
    "title": lambda v: str(v).title(),
    "trim": lambda v: str(v).strip(),
    "length": lambda v: len(v),  # type: ignore[arg-type]
    "join": join,
    "first": lambda v: next(iter(v), None),  # type: ignore[call-overload]
    "last": lambda v: list(v)[-1] if len(v) else None,  # type: ignore[arg-type]
    "escape": lambda v: html.escape(str(v)),
    "truncate": truncate,
    "string": lambda v: str(v),
}
