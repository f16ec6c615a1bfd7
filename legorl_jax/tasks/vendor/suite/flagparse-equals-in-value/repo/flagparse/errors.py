"""The one exception users see: a usage error with a message fit for the terminal."""

from __future__ import annotations


class UsageError(Exception):
    """Bad command line. `str(err)` is the message; `err.program` the program name, for the prefix."""

    def __init__(self, message: str, program: str = "") -> None:
        super().__init__(message)
        self.program = program

    def format(self) -> str:
        prefix = f"{self.program}: " if self.program else ""
        return f"{prefix}error: {self}"
