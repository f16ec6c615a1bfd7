"""Environment (settings and filters) and Template (a parsed tree ready to render)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stencil.filters import BUILTIN_FILTERS
from stencil.nodes import Context, render_all
from stencil.parser import parse_template
from stencil.undefined import StrictUndefined, Undefined


class Environment:
    def __init__(self, strict: bool = False, filters: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self.undefined: type[Undefined] = StrictUndefined if strict else Undefined
        self.filters: dict[str, Callable[..., Any]] = {**BUILTIN_FILTERS, **(filters or {})}

    def from_string(self, source: str) -> "Template":
        return Template(parse_template(source), self)


class Template:
    def __init__(self, nodes: list, env: Environment) -> None:
        self._nodes = nodes
        self._env = env

    def render(self, variables: Mapping[str, Any] | None = None, **kwargs: Any) -> str:
        ctx = Context({**(variables or {}), **kwargs}, self._env.filters, self._env.undefined)
        out: list[str] = []
        render_all(self._nodes, ctx, out)
        return "".join(out)
