"""apply_patch(doc, ops): a new document with the ops applied; the input is never modified."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from dictdiff.ops import Op
from dictdiff.paths import join, split


class PatchError(ValueError):
    pass


def apply_patch(doc: Any, ops: Iterable[Op]) -> Any:
    result = copy.deepcopy(doc)
    for op in ops:
        result = _apply(result, op)
    return result


def _apply(doc: Any, op: Op) -> Any:
    parts = split(op.path)
    if not parts:
        if op.op == "remove":
            raise PatchError("cannot remove the whole document")
        return copy.deepcopy(op.value)
    container = doc
    for i, part in enumerate(parts[:-1]):
        if not isinstance(container, dict) or part not in container:
            raise PatchError(f"{op.op} {op.path}: {join(parts[: i + 1])} does not exist")
        container = container[part]
    if not isinstance(container, dict):
        raise PatchError(f"{op.op} {op.path}: parent is not an object")
    key = parts[-1]
    if op.op == "add":
        if key in container:
            raise PatchError(f"add {op.path}: already exists")
        container[key] = copy.deepcopy(op.value)
    elif key not in container:
        raise PatchError(f"{op.op} {op.path}: does not exist")
    elif op.op == "remove":
        del container[key]
    else:
        container[key] = copy.deepcopy(op.value)
    return doc
