import pytest

from linkage import InconsistentOffset, RelativeOffsets


def test_readme_clock_skew():
    skew = RelativeOffsets()
    skew.relate("web1", "db", 5.0)
    skew.relate("web2", "web1", -2.0)
    assert skew.difference("web2", "db") == 3.0
    assert skew.difference("db", "web2") == -3.0
    assert skew.difference("web1", "cache") is None


def test_offsets_through_a_shared_reference():
    offsets = RelativeOffsets()
    offsets.relate("a", "ref", 1)
    offsets.relate("b", "ref", 4)
    offsets.relate("c", "b", 10)
    assert offsets.difference("c", "a") == 13
    assert offsets.positions("ref") == {"a": 1, "ref": 0, "b": 4, "c": 14}


def test_consistent_repeat_is_accepted_and_contradiction_rejected():
    offsets = RelativeOffsets(tolerance=0.01)
    offsets.relate("x", "y", 2.0)
    offsets.relate("y", "z", 3.0)
    offsets.relate("x", "z", 5.005)
    with pytest.raises(InconsistentOffset, match="5.0"):
        offsets.relate("z", "x", 4.0)


def test_unrelated_sets_stay_apart():
    offsets = RelativeOffsets()
    offsets.relate("a", "b", 1)
    offsets.relate("c", "d", 1)
    assert offsets.difference("a", "c") is None
    with pytest.raises(KeyError):
        offsets.positions("zzz")


def test_invalid_delta():
    with pytest.raises(ValueError, match="'5'"):
        RelativeOffsets().relate("a", "b", "5")
