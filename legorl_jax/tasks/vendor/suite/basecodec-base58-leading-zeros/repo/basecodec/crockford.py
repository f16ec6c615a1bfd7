"""Crockford's Base32 for integers: human-friendly IDs that survive being read aloud or retyped.

Decoding is forgiving the way the spec asks: case-insensitive, 'I'/'L' read as 1, 'O' as 0, hyphens
ignored. The optional check symbol is the value mod 37, drawn from the 32 digits plus '*~$=U'.
"""

from __future__ import annotations

from basecodec.alphabets import Alphabet
from basecodec.integers import decode_int, encode_int

CROCKFORD = Alphabet("crockford-base32", "0123456789ABCDEFGHJKMNPQRSTVWXYZ", case_insensitive=True)
_CHECK_SYMBOLS = CROCKFORD.chars + "*~$=U"
_ALIASES = str.maketrans({"I": "1", "L": "1", "O": "0"})


def crockford_encode(n: int, checksum: bool = False, group: int = 0) -> str:
    """group > 0 inserts a hyphen every `group` characters, counted from the right (the check stays last)."""
    text = encode_int(n, CROCKFORD)
    if group < 0:
        raise ValueError(f"group must be >= 0, got {group}")
    if group:
        chunks = []
        while text:
            chunks.append(text[-group:])
            text = text[:-group]
        text = "-".join(reversed(chunks))
    return text + (_CHECK_SYMBOLS[n % 37] if checksum else "")


def crockford_decode(text: str, checksum: bool = False) -> int:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    cleaned = text.replace("-", "").strip().upper().translate(_ALIASES)
    if checksum:
        if len(cleaned) < 2:
            raise ValueError(f"{text!r} is too short to carry a check symbol")
        cleaned, check = cleaned[:-1], cleaned[-1]
    n = decode_int(cleaned, CROCKFORD)
    if checksum and _CHECK_SYMBOLS[n % 37] != check:
        raise ValueError(f"check symbol mismatch in {text!r}: expected {_CHECK_SYMBOLS[n % 37]!r}, got {check!r}")
    return n
