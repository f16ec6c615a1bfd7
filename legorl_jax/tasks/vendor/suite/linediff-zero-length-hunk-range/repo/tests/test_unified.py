import difflib

import pytest

from linediff import PatchError, apply_patch, diffstat, unified_diff

OLD = [f"line {i}" for i in range(1, 21)]
NEW = OLD[:4] + ["changed 5"] + OLD[5:15] + ["inserted"] + OLD[15:]


def test_matches_difflib_for_two_hunks():
    ours = unified_diff(OLD, NEW, "old.txt", "new.txt")
    theirs = list(difflib.unified_diff(OLD, NEW, "old.txt", "new.txt", lineterm=""))
    assert ours == theirs


def test_single_line_ranges_omit_the_count():
    assert unified_diff(["a"], ["b"])[2] == "@@ -1 +1 @@"


def test_equal_inputs_give_no_diff():
    assert unified_diff(OLD, OLD) == []


def test_patch_round_trip_with_context():
    for context in (1, 3):
        assert apply_patch(OLD, "\n".join(unified_diff(OLD, NEW, context=context))) == NEW


def test_patch_with_wrong_context_is_rejected():
    text = "\n".join(unified_diff(OLD, NEW))
    with pytest.raises(PatchError, match="expected 'line 3', found 'x'"):
        apply_patch(OLD[:2] + ["x"] + OLD[3:], text)


def test_diffstat_counts():
    assert diffstat("\n".join(unified_diff(OLD, NEW))) == {"added": 2, "removed": 1}


def test_string_input_is_rejected():
    with pytest.raises(TypeError, match="splitlines"):
        unified_diff("abc", ["abc"])
