"""Undefined: the value of a lookup that found nothing.

Undefined is falsy, empty and renders as ''. StrictUndefined raises UndefinedError for anything
except being tested by the `default` filter (an isinstance check) or compared.
"""

from __future__ import annotations

from stencil.errors import UndefinedError


class Undefined:
    __slots__ = ("_hint",)

    def __init__(self, hint: str) -> None:
        self._hint = hint

    @property
    def hint(self) -> str:
        return self._hint

    def _fail(self, *args: object, **kwargs: object):
        raise UndefinedError(f"{self._hint!r} is undefined")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        self._fail()

    def __str__(self) -> str:
        return ""

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Undefined)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._hint!r})"


class StrictUndefined(Undefined):
    __slots__ = ()
    __str__ = Undefined._fail
    __bool__ = Undefined._fail
    __iter__ = Undefined._fail
    __len__ = Undefined._fail
