"""diffstat: counting what a patch adds and removes."""

from __future__ import annotations

from linediff.patch import parse_patch


def diffstat(patch: str) -> dict[str, int]:
    added = removed = 0
    for hunk in parse_patch(patch):
        added += sum(1 for line in hunk.lines if line[0] == "+")
        removed += sum(1 for line in hunk.lines if line[0] == "-")
    return {"added": added, "removed": removed}
