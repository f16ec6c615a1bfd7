import difflib

import pytest

from linediff import apply_patch, unified_diff


def test_diff_from_empty_file_starts_at_zero():
    assert unified_diff([], ["x", "y", "z"], "a", "b") == ["--- a", "+++ b", "@@ -0,0 +1,3 @@", "+x", "+y", "+z"]


def test_diff_to_empty_file_ends_at_zero():
    assert unified_diff(["x", "y"], [], "a", "b")[2] == "@@ -1,2 +0,0 @@"


@pytest.mark.parametrize(
    "old, new",
    [
        (["a", "b", "c"], ["a", "b", "X", "Y", "c"]),
        (["a", "b", "c"], ["a", "c"]),
        (["a", "b", "c"], ["P", "a", "b", "c"]),
        (["a", "b", "c"], ["a", "b", "c", "Z"]),
        ([], ["only"]),
    ],
    ids=["insert-middle", "delete-middle", "insert-top", "append", "new-file"],
)
def test_zero_context_headers_match_difflib_and_apply(old, new):
    ours = unified_diff(old, new, context=0)
    assert ours == list(difflib.unified_diff(old, new, "a", "b", n=0, lineterm=""))
    assert apply_patch(old, "\n".join(ours)) == new


def test_new_file_patch_applies_to_empty_original():
    new = ["#!/bin/sh", "echo hi"]
    assert apply_patch([], "\n".join(unified_diff([], new))) == new


def test_nonempty_ranges_unchanged():
    assert unified_diff(["a", "b"], ["a", "c"], context=0)[2] == "@@ -2 +2 @@"
