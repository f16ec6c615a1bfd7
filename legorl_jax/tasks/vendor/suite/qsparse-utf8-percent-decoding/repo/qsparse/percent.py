"""Percent-encoding and decoding of query components."""

from __future__ import annotations

from qsparse.errors import QueryError

_HEX = "0123456789abcdefABCDEF"
# Characters left as they are by the form encoder (WHATWG application/x-www-form-urlencoded).
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789*-._")


def percent_encode(text: str, safe: str = "", space_as_plus: bool = True) -> str:
    """Encodes text as UTF-8 and escapes every byte outside the unreserved set (and `safe`)."""
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    keep = _UNRESERVED | frozenset(safe)
    out: list[str] = []
    for ch in text:
        if ch in keep:
            out.append(ch)
        elif ch == " " and space_as_plus:
            out.append("+")
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def percent_decode(text: str, plus_as_space: bool = True, strict: bool = False) -> str:
    """Decodes %XX escapes (and '+' as a space). A malformed escape is kept literally unless strict."""
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    if plus_as_space:
        text = text.replace("+", " ")
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%":
            digits = text[i + 1 : i + 3]
            if len(digits) == 2 and all(d in _HEX for d in digits):
                out.append(chr(int(digits, 16)))
                i += 3
                continue
            if strict:
                raise QueryError(f"invalid percent-escape {text[i:i + 3]!r} at position {i}")
        out.append(ch)
        i += 1
    return "".join(out)
