"""Tokens: numbers, names, operators and parentheses, each with its source offset."""

from __future__ import annotations

import re
from dataclasses import dataclass

from calcpy.errors import ParseError

_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>\*\*|//|[-+*/%(),]))"
)


@dataclass(frozen=True)
class Token:
    kind: str  # number, name, op, end
    text: str
    position: int


def tokenize(text: str) -> list[Token]:
    if not isinstance(text, str):
        raise TypeError(f"expression must be a str, got {type(text).__name__}")
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            bad = len(text) - len(text[pos:].lstrip())
            raise ParseError(f"unexpected character {text[bad]!r}", bad)
        kind = m.lastgroup
        tokens.append(Token(kind, m.group(kind), m.start(kind)))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens
