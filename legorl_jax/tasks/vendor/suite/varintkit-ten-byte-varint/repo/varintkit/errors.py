"""The decoding error, which records where in the buffer the bad value starts."""

from __future__ import annotations


class DecodeError(ValueError):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.offset = offset
