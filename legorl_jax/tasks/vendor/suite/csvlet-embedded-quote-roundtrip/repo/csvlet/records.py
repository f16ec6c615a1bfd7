"""Records: header-aware reading and writing on top of rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from csvlet.dialect import Dialect
from csvlet.reader import read_rows
from csvlet.writer import write_rows


def read_records(
    text: str,
    dialect: str | Dialect | None = None,
    converters: Mapping[str, Callable[[str], object]] | None = None,
    restval: str = "",
    strict: bool = False,
) -> list[dict[str, object]]:
    """The first row names the columns. Short rows are padded with restval; long rows raise if strict."""
    rows = read_rows(text, dialect)
    if not rows:
        return []
    header, body = rows[0], rows[1:]
    if len(set(header)) != len(header):
        dupes = sorted({h for h in header if header.count(h) > 1})
        raise ValueError(f"duplicate column names in header: {dupes}")
    converters = dict(converters or {})
    unknown = sorted(set(converters) - set(header))
    if unknown:
        raise ValueError(f"converters for unknown columns: {unknown}")
    records: list[dict[str, object]] = []
    for number, row in enumerate(body, start=2):
        if len(row) > len(header) and strict:
            raise ValueError(f"row {number} has {len(row)} fields, header has {len(header)}")
        padded = row[: len(header)] + [restval] * (len(header) - len(row))
        record: dict[str, object] = {}
        for name, raw in zip(header, padded):
            convert = converters.get(name)
            try:
                record[name] = convert(raw) if convert else raw
            except (TypeError, ValueError) as exc:
                raise ValueError(f"row {number}, column {name!r}: cannot convert {raw!r}: {exc}") from None
        records.append(record)
    return records


def write_records(
    records: Iterable[Mapping[str, object]],
    fieldnames: list[str],
    dialect: str | Dialect | None = None,
) -> str:
    """Writes the header then one row per record, in fieldnames order; missing keys are empty."""
    rows: list[list[object]] = [list(fieldnames)]
    for record in records:
        extra = sorted(set(record) - set(fieldnames))
        if extra:
            raise ValueError(f"record has keys not in fieldnames: {extra}")
        rows.append([record.get(name) for name in fieldnames])
    return write_rows(rows, dialect)
