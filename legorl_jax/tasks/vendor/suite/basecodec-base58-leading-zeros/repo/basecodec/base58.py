"""Base58 for byte strings (Bitcoin convention by default)."""

from __future__ import annotations

from basecodec.alphabets import BASE58_BITCOIN, Alphabet
from basecodec.integers import decode_int, encode_int


def _as_bytes(data: object) -> bytes:
    if isinstance(data, str):
        raise TypeError("b58encode takes bytes; encode the text first (e.g. text.encode('utf-8'))")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected bytes-like, got {type(data).__name__}")
    return bytes(data)


def b58encode(data: bytes, alphabet: Alphabet = BASE58_BITCOIN) -> str:
    raw = _as_bytes(data)
    if not raw:
        return ""
    return encode_int(int.from_bytes(raw, "big"), alphabet)


def b58decode(text: str, alphabet: Alphabet = BASE58_BITCOIN) -> bytes:
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("ascii")
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    text = text.strip()
    if not text:
        return b""
    n = decode_int(text, alphabet)
    return n.to_bytes((n.bit_length() + 7) // 8, "big")
