"""Normalising calls through a function's signature.

`normalize(args, kwargs)` binds the call, fills in defaults and returns an ordered name -> value
mapping, so every spelling of the same call (positional, keyword, relying on defaults) is one key.
Extra keyword arguments (**kwargs) are sorted by name for the same reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


class CallNormalizer:
    def __init__(self, func: Callable) -> None:
        self._signature = inspect.signature(func)
        self._var_keyword = next((p.name for p in self._signature.parameters.values()
                                  if p.kind is inspect.Parameter.VAR_KEYWORD), None)

    def normalize(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if self._var_keyword is not None:
            extra = arguments[self._var_keyword]
            arguments[self._var_keyword] = {k: extra[k] for k in sorted(extra)}
        return arguments
