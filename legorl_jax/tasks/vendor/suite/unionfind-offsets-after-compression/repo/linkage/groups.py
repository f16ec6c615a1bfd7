"""Grouping records that share keys (the "accounts merge" problem)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from linkage.dsu import DisjointSet


def group_by_shared(records: Sequence[Iterable[Hashable]]) -> list[list[int]]:
    """Indices of records grouped so that records sharing any key end up together.

    Groups are ordered by their smallest index, indices ascending within each group.
    """
    owners = DisjointSet(range(len(records)))
    first_owner: dict[Hashable, int] = {}
    for index, keys in enumerate(records):
        for key in keys:
            if key in first_owner:
                owners.union(first_owner[key], index)
            else:
                first_owner[key] = index
    groups = [sorted(group) for group in owners.groups()]
    return sorted(groups, key=lambda g: g[0])
