"""Base58Check: payload + first 4 bytes of SHA256(SHA256(payload)), base58-encoded."""

from __future__ import annotations

import hashlib

from basecodec.alphabets import BASE58_BITCOIN, Alphabet
from basecodec.base58 import b58decode, b58encode

CHECKSUM_LENGTH = 4


class ChecksumError(ValueError):
    pass


def checksum(payload: bytes) -> bytes:
    return hashlib.sha256(hashlib.sha256(payload).digest()).digest()[:CHECKSUM_LENGTH]


def b58check_encode(payload: bytes, alphabet: Alphabet = BASE58_BITCOIN) -> str:
    """payload usually starts with a version byte (0x00 mainnet address, 0x05 script, 0x80 key, ...)."""
    payload = bytes(payload)
    return b58encode(payload + checksum(payload), alphabet)


def b58check_decode(text: str, alphabet: Alphabet = BASE58_BITCOIN) -> bytes:
    """Returns the payload (version byte included) after verifying the checksum."""
    raw = b58decode(text, alphabet)
    if len(raw) < CHECKSUM_LENGTH + 1:
        raise ChecksumError(f"{text!r} is too short to carry a checksum")
    payload, check = raw[:-CHECKSUM_LENGTH], raw[-CHECKSUM_LENGTH:]
    expected = checksum(payload)
    if check != expected:
        raise ChecksumError(f"checksum mismatch for {text!r}: got {check.hex()}, expected {expected.hex()}")
    return payload


def split_version(payload: bytes) -> tuple[int, bytes]:
    if not payload:
        raise ValueError("empty payload has no version byte")
    return payload[0], payload[1:]
