"""Grouping opcodes into hunks with a fixed amount of surrounding context."""

from __future__ import annotations

from dataclasses import dataclass

from linediff.edits import Opcode


@dataclass(frozen=True)
class Hunk:
    ops: tuple[Opcode, ...]

    @property
    def old_start(self) -> int:
        return self.ops[0].i1

    @property
    def old_length(self) -> int:
        return self.ops[-1].i2 - self.ops[0].i1

    @property
    def new_start(self) -> int:
        return self.ops[0].j1

    @property
    def new_length(self) -> int:
        return self.ops[-1].j2 - self.ops[0].j1


def group_hunks(ops: list[Opcode], context: int = 3) -> list[Hunk]:
    """Changes separated by more than 2*context equal lines go into separate hunks."""
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    if not ops or all(op.tag == "equal" for op in ops):
        return []
    ops = list(ops)
    # Trim the leading and trailing equal runs to the context size.
    if ops[0].tag == "equal":
        op = ops[0]
        keep = min(context, op.i2 - op.i1)
        ops[0] = Opcode("equal", op.i2 - keep, op.i2, op.j2 - keep, op.j2)
    if ops[-1].tag == "equal":
        op = ops[-1]
        keep = min(context, op.i2 - op.i1)
        ops[-1] = Opcode("equal", op.i1, op.i1 + keep, op.j1, op.j1 + keep)
    hunks: list[Hunk] = []
    current: list[Opcode] = []
    for op in ops:
        if op.tag == "equal" and op.i2 - op.i1 > 2 * context and current:
            current.append(Opcode("equal", op.i1, op.i1 + context, op.j1, op.j1 + context))
            hunks.append(Hunk(tuple(o for o in current if o.i1 != o.i2 or o.j1 != o.j2)))
            current = [Opcode("equal", op.i2 - context, op.i2, op.j2 - context, op.j2)]
            continue
        current.append(op)
    if current and any(o.tag != "equal" for o in current):
        hunks.append(Hunk(tuple(o for o in current if o.i1 != o.i2 or o.j1 != o.j2)))
    return hunks
