"""The reader: a character state machine turning CSV text into rows of strings."""

from __future__ import annotations

from csvlet.dialect import Dialect, get_dialect


class CSVSyntaxError(ValueError):
    """Raised for malformed input, with the 1-based line where the problem starts."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


# States of the machine.
_START_FIELD = 0
_IN_FIELD = 1
_IN_QUOTED = 2
_AFTER_QUOTE = 3


def read_rows(text: str, dialect: str | Dialect | None = None) -> list[list[str]]:
    """Parses the whole text. Quoted fields may contain delimiters, newlines and doubled quotes."""
    d = get_dialect(dialect)
    rows: list[list[str]] = []
    row: list[str] = []
    field: list[str] = []
    state = _START_FIELD
    line = 1
    quoted_from = 1

    def end_field() -> None:
        value = "".join(field)
        if d.strip_whitespace and state != _AFTER_QUOTE:
            value = value.strip()
        row.append(value)
        field.clear()

    def end_row() -> None:
        if d.skip_blank_lines and row == [""]:
            row.clear()
            return
        rows.append(list(row))
        row.clear()

    def end_at(ch: str) -> None:
        end_field()
        if ch == "\n":
            end_row()

    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\r" and i + 1 < n and text[i + 1] == "\n":
            i += 1
            c = "\n"
        separator = c == d.delimiter or c == "\n"
        if state == _START_FIELD:
            if c == d.quotechar:
                state = _IN_QUOTED
                quoted_from = line
            elif separator:
                end_at(c)
            else:
                field.append(c)
                state = _IN_FIELD
        elif state == _IN_FIELD:
            if separator:
                end_at(c)
                state = _START_FIELD
            else:
                field.append(c)
        elif state == _IN_QUOTED:
            if c == d.quotechar:
                state = _AFTER_QUOTE
            else:
                field.append(c)
        else:  # _AFTER_QUOTE: either a doubled quote or the end of the field
            if c == d.quotechar:
                field.append(c)
                state = _IN_QUOTED
            elif separator:
                end_at(c)
                state = _START_FIELD
            else:
                raise CSVSyntaxError(f"unexpected {c!r} after closing quote", line)
        if c == "\n":
            line += 1
        i += 1

    if state == _IN_QUOTED:
        raise CSVSyntaxError("unterminated quoted field", quoted_from)
    if state != _START_FIELD or row:
        end_field()
        end_row()
    return rows
