"""The writer: rows of values back to CSV text, quoting only what the dialect requires."""

from __future__ import annotations

from collections.abc import Iterable

from csvlet.dialect import QUOTE_ALL, QUOTE_NONNUMERIC, Dialect, get_dialect


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _to_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e16 else repr(value)
    return str(value)


def _needs_quotes(text: str, d: Dialect) -> bool:
    if text == "":
        return False
    if text != text.strip() and d.strip_whitespace:
        return True
    return any(ch in text for ch in (d.delimiter, d.quotechar, "\n", "\r"))


def format_field(value: object, dialect: str | Dialect | None = None) -> str:
    d = get_dialect(dialect)
    text = _to_text(value)
    quote = d.quoting == QUOTE_ALL
    quote = quote or (d.quoting == QUOTE_NONNUMERIC and not _is_number(value))
    quote = quote or _needs_quotes(text, d)
    if not quote:
        return text
    return d.quotechar + text + d.quotechar


def format_row(values: Iterable[object], dialect: str | Dialect | None = None) -> str:
    d = get_dialect(dialect)
    return d.delimiter.join(format_field(v, d) for v in values)


def write_rows(rows: Iterable[Iterable[object]], dialect: str | Dialect | None = None) -> str:
    """Formats every row, each followed by the dialect's line terminator."""
    d = get_dialect(dialect)
    return "".join(format_row(r, d) + d.lineterminator for r in rows)
