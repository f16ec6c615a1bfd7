"""The template tree and the render context (a stack of variable scopes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stencil.errors import TemplateError
from stencil.expressions import Compiled
from stencil.undefined import Undefined


class Context:
    def __init__(self, variables: Mapping[str, Any], filters: Mapping[str, Callable[..., Any]],
                 undefined: type[Undefined]) -> None:
        self._scopes: list[dict[str, Any]] = [dict(variables)]
        self._filters = filters
        self._undefined = undefined

    def resolve(self, name: str) -> Any:
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name]
        return self.undefined(name)

    def undefined(self, hint: str) -> Undefined:
        return self._undefined(hint)

    def filter(self, name: str) -> Callable[..., Any]:
        try:
            return self._filters[name]
        except KeyError:
            raise TemplateError(f"unknown filter {name!r}") from None

    def push(self, scope: dict[str, Any]) -> None:
        self._scopes.append(scope)

    def pop(self) -> None:
        self._scopes.pop()


def to_text(value: Any) -> str:
    if value is None:
        return ""
    return str(value)  # StrictUndefined raises here


@dataclass
class Text:
    text: str

    def render(self, ctx: Context, out: list[str]) -> None:
        out.append(self.text)


@dataclass
class Output:
    expr: Compiled

    def render(self, ctx: Context, out: list[str]) -> None:
        out.append(to_text(self.expr(ctx)))


@dataclass
class If:
    branches: list[tuple[Compiled, list]] = field(default_factory=list)
    otherwise: list = field(default_factory=list)

    def render(self, ctx: Context, out: list[str]) -> None:
        for condition, body in self.branches:
            if condition(ctx):
                render_all(body, ctx, out)
                return
        render_all(self.otherwise, ctx, out)


@dataclass
class For:
    target: str
    iterable: Compiled
    body: list = field(default_factory=list)
    otherwise: list = field(default_factory=list)

    def render(self, ctx: Context, out: list[str]) -> None:
        items = list(self.iterable(ctx) or ())
        if not items:
            render_all(self.otherwise, ctx, out)
            return
        for i, item in enumerate(items):
            loop = {"index": i + 1, "index0": i, "first": i == 0, "last": i == len(items) - 1, "length": len(items)}
            ctx.push({self.target: item, "loop": loop})
            try:
                render_all(self.body, ctx, out)
            finally:
                ctx.pop()


def render_all(nodes: list, ctx: Context, out: list[str]) -> None:
    for node in nodes:
        node.render(ctx, out)
