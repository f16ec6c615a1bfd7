"""Three-way merge: apply both sides' diffs against a common base.

Our document is the starting point; their ops are applied on top of it, except those that
conflict with one of ours. Identical changes made on both sides are applied once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dictdiff.diff import diff
from dictdiff.ops import Op
from dictdiff.patch import apply_patch


@dataclass(frozen=True)
class Conflict:
    path: str
    ours: Op
    theirs: Op


@dataclass
class MergeResult:
    merged: Any
    conflicts: list[Conflict] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.conflicts


def merge(base: Any, ours: Any, theirs: Any) -> MergeResult:
    our_ops = diff(base, ours)
    their_ops = diff(base, theirs)
    ours_by_path = {op.path: op for op in our_ops}
    to_apply: list[Op] = []
    conflicts: list[Conflict] = []
    for op in their_ops:
        mine = ours_by_path.get(op.path)
        if mine is None:
            to_apply.append(op)
        elif mine != op:
            conflicts.append(Conflict(op.path, mine, op))
    return MergeResult(apply_patch(ours, to_apply), conflicts)
