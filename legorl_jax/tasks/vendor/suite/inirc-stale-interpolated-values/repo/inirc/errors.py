"""Errors for syntax, duplicates and unresolvable references."""

from __future__ import annotations


class ParseError(ValueError):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class DuplicateError(ParseError):
    pass


class InterpolationError(ValueError):
    pass
