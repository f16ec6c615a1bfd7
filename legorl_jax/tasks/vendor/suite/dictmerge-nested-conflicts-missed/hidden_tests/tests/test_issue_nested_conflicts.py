from dictdiff import Op, merge

BASE = {"server": {"port": 80, "tls": False}, "cache": {"size": 10}, "debug": False}


def without(doc, key):
    return {k: v for k, v in doc.items() if k != key}


def test_edit_inside_a_section_we_removed_is_a_conflict():
    ours = without(BASE, "server")
    theirs = dict(BASE, server={"port": 8080, "tls": False})
    result = merge(BASE, ours, theirs)
    assert result.merged == ours
    assert [(c.path, c.ours, c.theirs) for c in result.conflicts] == [
        ("/server/port", Op("remove", "/server"), Op("replace", "/server/port", 8080))]


def test_section_they_removed_keeps_our_edit_and_conflicts():
    ours = dict(BASE, server={"port": 8080, "tls": False})
    theirs = without(BASE, "server")
    result = merge(BASE, ours, theirs)
    assert result.merged == ours
    assert len(result.conflicts) == 1
    assert result.conflicts[0].theirs == Op("remove", "/server")


def test_key_added_inside_a_value_we_replaced_is_a_conflict():
    ours = dict(BASE, cache="disabled")
    theirs = dict(BASE, cache={"size": 10, "ttl": 60})
    result = merge(BASE, ours, theirs)
    assert result.merged == ours
    assert [c.theirs for c in result.conflicts] == [Op("add", "/cache/ttl", 60)]


def test_removing_a_section_and_something_inside_it_is_not_a_conflict():
    ours = without(BASE, "server")
    theirs = dict(BASE, server={"port": 80})
    result = merge(BASE, ours, theirs)
    assert result.clean
    assert result.merged == ours


def test_keys_sharing_a_prefix_are_unrelated():
    base = {"log": 1, "logging": {"level": "info"}}
    ours = {"logging": {"level": "info"}}
    theirs = {"log": 1, "logging": {"level": "debug"}}
    result = merge(base, ours, theirs)
    assert result.clean
    assert result.merged == {"logging": {"level": "debug"}}


def test_escaped_keys_are_compared_component_by_component():
    base = {"a": {"b": 1}, "a/b": {"c": 1}}
    ours = {"a/b": {"c": 1}}
    theirs = {"a": {"b": 1}, "a/b": {"c": 2}}
    result = merge(base, ours, theirs)
    assert result.clean
    assert result.merged == {"a/b": {"c": 2}}
