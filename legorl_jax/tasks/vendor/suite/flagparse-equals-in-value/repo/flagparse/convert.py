"""Converting option strings to typed values."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flagparse.errors import UsageError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"not a boolean: {text!r}")


def convert(display: str, raw: str, type_: Callable[[str], object], choices: Sequence[object] | None) -> object:
    """Applies the option's type, then checks choices; errors name the option and the value."""
    converter = parse_bool if type_ is bool else type_
    try:
        value = converter(raw)
    except (TypeError, ValueError):
        type_name = getattr(type_, "__name__", repr(type_))
        raise UsageError(f"{display}: invalid {type_name} value: {raw!r}") from None
    if choices is not None and value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise UsageError(f"{display}: invalid choice: {raw!r} (choose from {allowed})")
    return value
