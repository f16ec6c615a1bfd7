"""Splitting a query string into decoded (key, value) pairs."""

from __future__ import annotations

import re

from qsparse.errors import QueryError
from qsparse.multidict import QueryDict
from qsparse.percent import percent_decode

_SEPARATORS = {"&": re.compile("&"), "&;": re.compile("[&;]")}


def parse_pairs(
    query: str,
    keep_blank_values: bool = False,
    strict: bool = False,
    separator: str = "&",
    max_fields: int | None = None,
) -> list[tuple[str, str]]:
    """Parses 'a=1&b=&c' into pairs. A leading '?' is ignored; blank values are dropped unless kept."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    if separator not in _SEPARATORS:
        raise ValueError(f"separator must be one of {sorted(_SEPARATORS)}, got {separator!r}")
    if query.startswith("?"):
        query = query[1:]
    fields = [f for f in _SEPARATORS[separator].split(query) if f]
    if max_fields is not None and len(fields) > max_fields:
        raise QueryError(f"query has {len(fields)} fields, more than max_fields={max_fields}")
    pairs: list[tuple[str, str]] = []
    for field in fields:
        if "=" in field:
            raw_key, raw_value = field.split("=", 1)
        elif strict:
            raise QueryError(f"field without '=': {field!r}")
        else:
            raw_key, raw_value = field, ""
        if not raw_value and not keep_blank_values:
            continue
        pairs.append((percent_decode(raw_key, strict=strict), percent_decode(raw_value, strict=strict)))
    return pairs


def parse_query(query: str, **options: object) -> QueryDict:
    return QueryDict(parse_pairs(query, **options))
