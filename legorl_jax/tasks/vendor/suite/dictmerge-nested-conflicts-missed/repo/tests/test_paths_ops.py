import pytest

from dictdiff import Op, join, split
from dictdiff.paths import parent


def test_keys_with_slashes_and_tildes_round_trip():
    parts = ["a/b", "c~d", "~1", ""]
    path = join(parts)
    assert path == "/a~1b/c~0d/~01/"
    assert split(path) == parts


def test_root_and_parent():
    assert split("") == []
    assert parent("/a/b~1c") == "/a"
    with pytest.raises(ValueError, match="root"):
        parent("")
    with pytest.raises(ValueError, match="'a/b'"):
        split("a/b")


def test_op_dict_round_trip_and_validation():
    op = Op("replace", "/x", [1, 2])
    assert Op.from_dict(op.to_dict()) == op
    assert Op("remove", "/x").to_dict() == {"op": "remove", "path": "/x"}
    with pytest.raises(ValueError, match="'move'"):
        Op("move", "/x")
    with pytest.raises(ValueError, match="needs a 'value'"):
        Op.from_dict({"op": "add", "path": "/x"})
