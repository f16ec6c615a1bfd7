"""linediff: line diffs in, unified diffs out, and back."""

from linediff.edits import Opcode, opcodes
from linediff.hunks import Hunk, group_hunks
from linediff.patch import PatchError, apply_patch, parse_patch
from linediff.stats import diffstat
from linediff.unified import unified_diff

__all__ = [
    "Hunk",
    "Opcode",
    "PatchError",
    "apply_patch",
    "diffstat",
    "group_hunks",
    "opcodes",
    "parse_patch",
    "unified_diff",
]
