"""Errors carry the character offset in the expression where the problem was found."""

from __future__ import annotations


class CalcError(ValueError):
    def __init__(self, message: str, position: int | None = None) -> None:
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"{message}{where}")
        self.position = position


class ParseError(CalcError):
    """The text is not a well-formed expression."""


class EvaluationError(CalcError):
    """The expression is well formed but cannot be computed (unknown name, division by zero, ...)."""
