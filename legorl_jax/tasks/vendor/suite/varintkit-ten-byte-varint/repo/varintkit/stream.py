"""A Writer that appends encoded values to a buffer and a Reader that consumes them in order."""

from __future__ import annotations

import struct

from varintkit.errors import DecodeError
from varintkit.varint import decode_int64, decode_uvarint, encode_int64, encode_uvarint
from varintkit.zigzag import decode_svarint, encode_svarint


class Writer:
    def __init__(self) -> None:
        self._buf = bytearray()

    def write_uvarint(self, value: int) -> None:
        self._buf += encode_uvarint(value)

    def write_svarint(self, value: int) -> None:
        self._buf += encode_svarint(value)

    def write_int64(self, value: int) -> None:
        self._buf += encode_int64(value)

    def write_fixed32(self, value: int) -> None:
        self._buf += struct.pack("<I", value)

    def write_double(self, value: float) -> None:
        self._buf += struct.pack("<d", value)

    def write_bytes(self, data: bytes) -> None:
        """Length-prefixed: a uvarint byte count, then the bytes."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes-like, got {type(data).__name__}")
        self._buf += encode_uvarint(len(data))
        self._buf += data

    def write_string(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def getvalue(self) -> bytes:
        return bytes(self._buf)


class Reader:
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(bytes(data))
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self._data) - self.pos

    def read_uvarint(self) -> int:
        value, self.pos = decode_uvarint(self._data, self.pos)
        return value

    def read_svarint(self) -> int:
        value, self.pos = decode_svarint(self._data, self.pos)
        return value

    def read_int64(self) -> int:
        value, self.pos = decode_int64(self._data, self.pos)
        return value

    def _take(self, n: int, what: str) -> bytes:
        if n > self.remaining:
            raise DecodeError(f"{what} needs {n} bytes, {self.remaining} left", self.pos)
        chunk = bytes(self._data[self.pos : self.pos + n])
        self.pos += n
        return chunk

    def read_fixed32(self) -> int:
        return struct.unpack("<I", self._take(4, "fixed32"))[0]

    def read_double(self) -> float:
        return struct.unpack("<d", self._take(8, "double"))[0]

    def read_bytes(self) -> bytes:
        start = self.pos
        length = self.read_uvarint()
        try:
            return self._take(length, "length-prefixed field")
        except DecodeError:
            raise DecodeError(f"length-prefixed field of {length} bytes runs past the end", start) from None

    def read_string(self) -> str:
        start = self.pos
        raw = self.read_bytes()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"invalid UTF-8 in string ({exc.reason})", start) from None
