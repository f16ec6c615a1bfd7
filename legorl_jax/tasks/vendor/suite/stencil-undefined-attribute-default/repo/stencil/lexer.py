"""Splitting template source into text, output ({{ }}) and tag ({% %}) tokens; comments vanish."""

from __future__ import annotations

import re
from dataclasses import dataclass

from stencil.errors import TemplateSyntaxError

_MARKUP = re.compile(r"{{(.*?)}}|{%(.*?)%}|{#.*?#}", re.S)


@dataclass(frozen=True)
class Token:
    kind: str  # text, output, tag
    value: str
    line: int


def tokenize(source: str) -> list[Token]:
    if not isinstance(source, str):
        raise TypeError(f"template source must be a str, got {type(source).__name__}")
    tokens: list[Token] = []
    pos = 0
    line = 1
    for m in _MARKUP.finditer(source):
        text = source[pos : m.start()]
        if text:
            tokens.append(Token("text", text, line))
        line += text.count("\n")
        if m.group(1) is not None:
            tokens.append(Token("output", m.group(1).strip(), line))
        elif m.group(2) is not None:
            tokens.append(Token("tag", m.group(2).strip(), line))
        line += m.group(0).count("\n")
        pos = m.end()
    rest = source[pos:]
    for opener in ("{{", "{%", "{#"):
        if opener in rest:
            where = line + rest[: rest.index(opener)].count("\n")
            raise TemplateSyntaxError(f"unclosed {opener!r}", where)
    if rest:
        tokens.append(Token("text", rest, line))
    return tokens
