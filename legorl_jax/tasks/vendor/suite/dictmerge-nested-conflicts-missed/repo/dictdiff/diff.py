"""diff(old, new): the ops that turn `old` into `new`.

Dicts are walked key by key (removed keys, then changed and added keys, each in sorted key order
so the output is deterministic); everything else is compared with == and replaced as a whole.
"""

from __future__ import annotations

from typing import Any

from dictdiff.ops import Op
from dictdiff.paths import join


def diff(old: Any, new: Any) -> list[Op]:
    ops: list[Op] = []
    _diff(old, new, [], ops)
    return ops


def _diff(old: Any, new: Any, at: list[str], ops: list[Op]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(k for k in old if k not in new):
            ops.append(Op("remove", join(at + [_key(key)])))
        for key in sorted(new):
            path = at + [_key(key)]
            if key not in old:
                ops.append(Op("add", join(path), new[key]))
            else:
                _diff(old[key], new[key], path, ops)
        return
    if type(old) is not type(new) or old != new:
        ops.append(Op("replace", join(at), new))


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"only str keys can be diffed, got {key!r}")
    return key
