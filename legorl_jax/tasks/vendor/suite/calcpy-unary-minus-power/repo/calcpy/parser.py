"""Recursive-descent parser, one method per precedence level (lowest first)."""

from __future__ import annotations

from calcpy.errors import ParseError
from calcpy.lexer import Token, tokenize
from calcpy.nodes import Binary, Call, Node, Num, Unary, Var


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _accept(self, *ops: str) -> Token | None:
        if self.tok.kind == "op" and self.tok.text in ops:
            tok = self.tok
            self.i += 1
            return tok
        return None

    def _expect(self, op: str) -> Token:
        tok = self._accept(op)
        if tok is None:
            found = self.tok.text or "end of input"
            raise ParseError(f"expected {op!r}, found {found!r}", self.tok.position)
        return tok

    def parse(self) -> Node:
        node = self._additive()
        if self.tok.kind != "end":
            raise ParseError(f"unexpected {self.tok.text!r}", self.tok.position)
        return node

    def _additive(self) -> Node:
        node = self._multiplicative()
        while (tok := self._accept("+", "-")) is not None:
            node = Binary(tok.text, node, self._multiplicative(), tok.position)
        return node

    def _multiplicative(self) -> Node:
        node = self._power()
        while (tok := self._accept("*", "/", "//", "%")) is not None:
            node = Binary(tok.text, node, self._power(), tok.position)
        return node

    def _power(self) -> Node:
        base = self._unary()
        tok = self._accept("**")
        if tok is None:
            return base
        # Right-associative: 2 ** 3 ** 2 is 2 ** 9.
        return Binary("**", base, self._power(), tok.position)

    def _unary(self) -> Node:
        tok = self._accept("+", "-")
        if tok is not None:
            return Unary(tok.text, self._unary())
        return self._primary()

    def _primary(self) -> Node:
        tok = self.tok
        if tok.kind == "number":
            self.i += 1
            is_float = any(c in tok.text for c in ".eE")
            return Num(float(tok.text) if is_float else int(tok.text))
        if tok.kind == "name":
            self.i += 1
            if self._accept("("):
                args: list[Node] = []
                if not self._accept(")"):
                    args.append(self._additive())
                    while self._accept(","):
                        args.append(self._additive())
                    self._expect(")")
                return Call(tok.text, tuple(args), tok.position)
            return Var(tok.text, tok.position)
        if self._accept("("):
            node = self._additive()
            self._expect(")")
            return node
        found = tok.text or "end of input"
        raise ParseError(f"expected a number, name or '(', found {found!r}", tok.position)


def parse(text: str) -> Node:
    return _Parser(text).parse()
