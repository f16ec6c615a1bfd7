"""Cache keys: a hashable, type-aware snapshot of a call's arguments.

Containers are frozen recursively into tagged tuples, so [1, 2] and (1, 2) give different keys and a
later mutation of the caller's list cannot change a stored key. With `typed=True` every leaf also
carries its type, so 1, 1.0 and True are distinct.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any


def freeze(value: Any, typed: bool = False) -> Hashable:
    if isinstance(value, list):
        return ("list", tuple(freeze(v, typed) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(freeze(v, typed) for v in value))
    if isinstance(value, (set, frozenset)):
        items = [freeze(v, typed) for v in value]
        return (type(value).__name__, frozenset(items))
    if isinstance(value, Mapping):
        items = [(freeze(k, typed), freeze(v, typed)) for k, v in value.items()]
        return ("dict", frozenset(items))
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"cannot memoise on an unhashable {type(value).__name__} argument: {value!r}") from None
    return (type(value), value) if typed else value


def make_key(arguments: Mapping[str, Any], typed: bool = False) -> Hashable:
    """Key of a normalised call: parameter name -> value, in signature order."""
    return tuple((name, freeze(value, typed)) for name, value in arguments.items())
