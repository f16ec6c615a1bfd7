"""Comparator: one operator applied to one version, the atom every range is built from."""

from __future__ import annotations

import operator
from dataclasses import dataclass

from semverkit.version import Version

_OPS = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
}


@dataclass(frozen=True)
class Comparator:
    op: str
    version: Version

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"comparator operator must be one of {sorted(_OPS)}, got {self.op!r}")

    def matches(self, version: Version) -> bool:
        return _OPS[self.op](version, self.version)

    def __str__(self) -> str:
        return f"{self.op}{self.version}" if self.op != "=" else str(self.version)
