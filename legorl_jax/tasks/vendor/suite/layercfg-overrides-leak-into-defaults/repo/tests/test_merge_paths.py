import pytest

from layercfg import ConfigError, deep_merge, get_path, merge_layers, set_path


def test_deep_merge_overrides_leaves_and_keeps_siblings():
    base = {"server": {"host": "a", "port": 1}, "debug": False}
    assert deep_merge(base, {"server": {"port": 2}}) == {"server": {"host": "a", "port": 2}, "debug": False}


def test_lists_are_replaced_not_concatenated():
    assert deep_merge({"p": ["a"]}, {"p": ["b"]}) == {"p": ["b"]}


def test_merge_layers_in_order():
    assert merge_layers([{"a": 1}, {"a": 2, "b": 1}, {"b": 3}]) == {"a": 2, "b": 3}


def test_get_and_set_paths():
    tree = {"a": {"b": 1}}
    set_path(tree, "a.c.d", 2)
    set_path(tree, "l", ["x"], append=True)
    assert get_path(tree, "a.c.d") == 2
    assert tree["l"] == ["x"]
    assert get_path(tree, "a.zz", "dflt") == "dflt"


def test_set_path_through_a_scalar_is_an_error():
    with pytest.raises(ConfigError, match="'a.b' is not a table"):
        set_path({"a": {"b": 1}}, "a.b.c", 2)
    with pytest.raises(ConfigError, match="invalid key path"):
        get_path({}, "a..b")
