from dictdiff import Op, merge

BASE = {"server": {"port": 80, "tls": False}, "debug": False}


def test_readme_merge_of_independent_changes():
    ours = {"server": {"port": 8080, "tls": False}, "debug": False}
    theirs = {"server": {"port": 80, "tls": True}, "debug": True}
    result = merge(BASE, ours, theirs)
    assert result.merged == {"server": {"port": 8080, "tls": True}, "debug": True}
    assert result.clean


def test_same_value_changed_differently_conflicts_and_ours_wins():
    ours = {"server": {"port": 8080, "tls": False}, "debug": False}
    theirs = {"server": {"port": 9090, "tls": False}, "debug": False}
    result = merge(BASE, ours, theirs)
    assert result.merged == ours
    assert [(c.path, c.ours.value, c.theirs.value) for c in result.conflicts] == [("/server/port", 8080, 9090)]


def test_identical_changes_on_both_sides_apply_once():
    both = {"server": {"port": 443, "tls": True}, "debug": False, "name": "x"}
    result = merge(BASE, both, both)
    assert result.merged == both and result.clean


def test_additions_of_different_keys_merge():
    ours = dict(BASE, a=1)
    theirs = dict(BASE, b=2)
    assert merge(BASE, ours, theirs).merged == dict(BASE, a=1, b=2)


def test_conflicting_additions_of_the_same_key():
    result = merge(BASE, dict(BASE, a=1), dict(BASE, a=2))
    assert result.merged["a"] == 1
    assert result.conflicts[0].theirs == Op("add", "/a", 2)
