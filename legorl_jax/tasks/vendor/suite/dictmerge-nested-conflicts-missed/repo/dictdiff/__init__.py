"""Diff, patch and three-way merge of nested dicts."""

from dictdiff.diff import diff
from dictdiff.merge import Conflict, MergeResult, merge
from dictdiff.ops import Op
from dictdiff.patch import PatchError, apply_patch
from dictdiff.paths import join, split

__all__ = ["Conflict", "MergeResult", "Op", "PatchError", "apply_patch", "diff", "join", "merge", "split"]
__version__ = "0.7.0"
