"""Expressions inside {{ }} and tags, compiled to functions of the render context.

Grammar (loosest first): or, and, not, comparison (== != < > <= >= in), filter chain (|name(args)),
postfix lookup (.name, [expr]), primary (name, string, number, true/false/none, parenthesis).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from stencil.errors import TemplateSyntaxError, UndefinedError

Compiled = Callable[[Any], Any]  # takes the Context

_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?)|(?P<string>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|!=|<=|>=|[<>|.,()\[\]]))"
)
_COMPARE = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "in": lambda a, b: a in b,
}


def get_attribute(ctx: Any, value: Any, name: str, path: str) -> Any:
    """value.name: a mapping key first, then an attribute."""
    if isinstance(value, Mapping):
        if name in value:
            return value[name]
        raise UndefinedError(f"{path!r} is undefined")
    try:
        return getattr(value, name)
    except AttributeError:
        raise UndefinedError(f"{path!r} is undefined") from None


def get_item(ctx: Any, value: Any, key: Any, path: str) -> Any:
    try:
        return value[key]
    except (KeyError, IndexError, TypeError):
        return get_attribute(ctx, value, key, path) if isinstance(key, str) else ctx.undefined(path)


class _Parser:
    def __init__(self, text: str, line: int) -> None:
        self.line = line
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if not text[pos:].strip():
                break
            m = _TOKEN.match(text, pos)
            if not m:
                raise TemplateSyntaxError(f"unexpected {text[pos:].strip()[:10]!r} in expression", line)
            self.tokens.append((m.lastgroup, m.group(m.lastgroup)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str] | None:
        kind, text = self.peek()
        if value is None or text == value and kind in ("op", "name"):
            if kind == "end":
                return None
            self.i += 1
            return kind, text
        return None

    def expect(self, value: str) -> None:
        if self.take(value) is None:
            raise TemplateSyntaxError(f"expected {value!r}, found {self.peek()[1] or 'end'!r}", self.line)

    def parse(self) -> Compiled:
        node = self.or_()
        if self.peek()[0] != "end":
            raise TemplateSyntaxError(f"unexpected {self.peek()[1]!r} in expression", self.line)
        return node

    def or_(self) -> Compiled:
        node = self.and_()
        while self.take("or"):
            left, right = node, self.and_()
            node = lambda ctx, l=left, r=right: l(ctx) or r(ctx)
        return node

    def and_(self) -> Compiled:
        node = self.not_()
        while self.take("and"):
            left, right = node, self.not_()
            node = lambda ctx, l=left, r=right: l(ctx) and r(ctx)
        return node

    def not_(self) -> Compiled:
        if self.take("not"):
            inner = self.not_()
            return lambda ctx: not inner(ctx)
        return self.comparison()

    def comparison(self) -> Compiled:
        left = self.filtered()
        kind, text = self.peek()
        if text in _COMPARE and kind in ("op", "name"):
            self.i += 1
            right, op = self.filtered(), _COMPARE[text]
            return lambda ctx: op(left(ctx), right(ctx))
        return left

    def filtered(self) -> Compiled:
        node, _ = self.postfix()
        while self.take("|"):
            kind, name = self.take() or ("end", "")
            if kind != "name":
                raise TemplateSyntaxError("expected a filter name after '|'", self.line)
            args: list[Compiled] = []
            if self.take("("):
                if not self.take(")"):
                    args.append(self.or_())
                    while self.take(","):
                        args.append(self.or_())
                    self.expect(")")
            node = lambda ctx, n=node, f=name, a=tuple(args): ctx.filter(f)(n(ctx), *(x(ctx) for x in a))
        return node

    def postfix(self) -> tuple[Compiled, str]:
        node, path = self.primary()
        while True:
            if self.take("."):
                kind, name = self.take() or ("end", "")
                if kind != "name" or name.startswith("_"):
                    raise TemplateSyntaxError(f"invalid attribute name {name!r}", self.line)
                path = f"{path}.{name}"
                node = lambda ctx, n=node, a=name, p=path: get_attribute(ctx, n(ctx), a, p)
            elif self.take("["):
                key = self.or_()
                self.expect("]")
                path = f"{path}[...]"
                node = lambda ctx, n=node, k=key, p=path: get_item(ctx, n(ctx), k(ctx), p)
            else:
                return node, path

    def primary(self) -> tuple[Compiled, str]:
        kind, text = self.peek()
        if kind == "end":
            raise TemplateSyntaxError("expected an expression", self.line)
        self.i += 1
        if kind == "number":
            value = float(text) if "." in text else int(text)
            return (lambda ctx: value), text
        if kind == "string":
            value = bytes(text[1:-1], "utf-8").decode("unicode_escape")
            return (lambda ctx: value), text
        if kind == "name":
            constants = {"true": True, "false": False, "none": None}
            if text in constants:
                value = constants[text]
                return (lambda ctx: value), text
            return (lambda ctx: ctx.resolve(text)), text
        if text == "(":
            node = self.or_()
            self.expect(")")
            return node, "(...)"
        raise TemplateSyntaxError(f"unexpected {text!r} in expression", self.line)


def compile_expression(text: str, line: int = 1) -> Compiled:
    if not text.strip():
        raise TemplateSyntaxError("empty expression", line)
    return _Parser(text, line).parse()
