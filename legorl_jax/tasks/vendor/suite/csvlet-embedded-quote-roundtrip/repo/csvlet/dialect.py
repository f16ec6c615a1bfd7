"""Dialects: the punctuation a CSV file uses."""

from __future__ import annotations

from dataclasses import dataclass


class DialectError(ValueError):
    """Raised when a dialect is internally inconsistent."""


QUOTE_MINIMAL = "minimal"
QUOTE_ALL = "all"
QUOTE_NONNUMERIC = "nonnumeric"
_QUOTING = (QUOTE_MINIMAL, QUOTE_ALL, QUOTE_NONNUMERIC)


@dataclass(frozen=True)
class Dialect:
    delimiter: str = ","
    quotechar: str = '"'
    lineterminator: str = "\n"
    quoting: str = QUOTE_MINIMAL
    skip_blank_lines: bool = True
    strip_whitespace: bool = False

    def __post_init__(self) -> None:
        if len(self.delimiter) != 1:
            raise DialectError(f"delimiter must be a single character, got {self.delimiter!r}")
        if len(self.quotechar) != 1:
            raise DialectError(f"quotechar must be a single character, got {self.quotechar!r}")
        if self.delimiter == self.quotechar:
            raise DialectError("delimiter and quotechar must differ")
        if self.delimiter in "\r\n" or self.quotechar in "\r\n":
            raise DialectError("delimiter and quotechar cannot be line breaks")
        if self.lineterminator not in ("\n", "\r\n"):
            raise DialectError(f"lineterminator must be '\\n' or '\\r\\n', got {self.lineterminator!r}")
        if self.quoting not in _QUOTING:
            raise DialectError(f"quoting must be one of {_QUOTING}, got {self.quoting!r}")


EXCEL = Dialect()
EXCEL_TAB = Dialect(delimiter="\t")
UNIX = Dialect(lineterminator="\n", quoting=QUOTE_ALL)


def get_dialect(name_or_dialect: str | Dialect | None) -> Dialect:
    """Accepts a Dialect, a registered name, or None for the default."""
    if name_or_dialect is None:
        return EXCEL
    if isinstance(name_or_dialect, Dialect):
        return name_or_dialect
    registry = {"excel": EXCEL, "excel-tab": EXCEL_TAB, "unix": UNIX}
    try:
        return registry[name_or_dialect]
    except KeyError:
        raise DialectError(f"unknown dialect {name_or_dialect!r}; known: {sorted(registry)}") from None
