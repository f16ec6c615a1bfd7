"""Edit scripts: the longest common subsequence of two line lists, as difflib-style opcodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Opcode:
    tag: str  # equal, replace, delete, insert
    i1: int
    i2: int
    j1: int
    j2: int


def _lcs_table(a: Sequence[str], b: Sequence[str]) -> list[list[int]]:
    """table[i][j] = LCS length of a[i:] and b[j:] (suffix form, so backtracking walks forward)."""
    n, m = len(a), len(b)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if a[i] == b[j] else max(below[j], row[j + 1])
    return table


def opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """Opcodes covering both sequences in order; a delete next to an insert is merged into a replace."""
    table = _lcs_table(a, b)
    steps: list[str] = []  # '=', '-', '+'
    i = j = 0
    while i < len(a) or j < len(b):
        if i < len(a) and j < len(b) and a[i] == b[j]:
            steps.append("=")
            i, j = i + 1, j + 1
        elif j >= len(b) or (i < len(a) and table[i + 1][j] >= table[i][j + 1]):
            steps.append("-")  # deletions first, as diff -u prints them
            i += 1
        else:
            steps.append("+")
            j += 1
    ops: list[Opcode] = []
    i = j = 0
    k = 0
    while k < len(steps):
        if steps[k] == "=":
            start_i, start_j = i, j
            while k < len(steps) and steps[k] == "=":
                i, j, k = i + 1, j + 1, k + 1
            ops.append(Opcode("equal", start_i, i, start_j, j))
            continue
        start_i, start_j = i, j
        while k < len(steps) and steps[k] != "=":
            if steps[k] == "-":
                i += 1
            else:
                j += 1
            k += 1
        tag = "replace" if i > start_i and j > start_j else ("delete" if i > start_i else "insert")
        ops.append(Opcode(tag, start_i, i, start_j, j))
    return ops
