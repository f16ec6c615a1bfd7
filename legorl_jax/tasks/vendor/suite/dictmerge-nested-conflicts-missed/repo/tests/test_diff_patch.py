import pytest

from dictdiff import Op, PatchError, apply_patch, diff

BASE = {"server": {"port": 80, "tls": False}, "debug": False, "tags": ["a"]}


def test_diff_lists_removals_then_changes_in_key_order():
    new = {"server": {"port": 8080}, "tags": ["a", "b"], "name": "web"}
    assert diff(BASE, new) == [
        Op("remove", "/debug"),
        Op("add", "/name", "web"),
        Op("remove", "/server/tls"),
        Op("replace", "/server/port", 8080),
        Op("replace", "/tags", ["a", "b"]),
    ]


def test_patch_applies_diff_without_touching_input():
    new = {"server": {"port": 8080, "tls": True, "certs": {"a/b": 1}}, "debug": False, "tags": []}
    ops = diff(BASE, new)
    assert apply_patch(BASE, ops) == new
    assert BASE["server"] == {"port": 80, "tls": False}


def test_type_changes_are_replacements():
    assert diff({"x": 1}, {"x": 1.0}) == [Op("replace", "/x", 1.0)]
    assert diff({"x": {"y": 1}}, {"x": "flat"}) == [Op("replace", "/x", "flat")]
    assert diff(BASE, BASE) == []


def test_patch_errors_name_the_path():
    with pytest.raises(PatchError, match="/nope does not exist"):
        apply_patch(BASE, [Op("replace", "/nope/x", 1)])
    with pytest.raises(PatchError, match="already exists"):
        apply_patch(BASE, [Op("add", "/debug", True)])
    with pytest.raises(PatchError, match="parent is not an object"):
        apply_patch(BASE, [Op("add", "/debug/x", 1)])
