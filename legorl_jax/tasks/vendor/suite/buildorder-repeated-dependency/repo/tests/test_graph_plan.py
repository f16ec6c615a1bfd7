import pytest

from buildorder import DependencyGraph, find_cycle, parse_rules, plan


def test_closure_and_plan_skip_unneeded_and_done_targets():
    graph = parse_rules("""
        app: lib util
        lib: core
        util: core
        docs: sphinx
    """)
    assert graph.closure(["lib"]) == {"lib", "core"}
    assert plan(graph, ["app"]) == ["core", "lib", "util", "app"]
    assert plan(graph, ["app"], done=["core", "lib"]) == ["util", "app"]
    assert plan(graph, ["docs"]) == ["sphinx", "docs"]


def test_required_by_lists_dependents():
    graph = parse_rules("app: lib\ntests: lib")
    assert graph.required_by("lib") == ["app", "tests"]


def test_find_cycle_returns_none_for_dags():
    assert find_cycle(parse_rules("a: b\nb: c")) is None


def test_bad_declarations_are_rejected():
    graph = DependencyGraph()
    with pytest.raises(ValueError, match="itself"):
        graph.add("a", ["a"])
    with pytest.raises(TypeError, match="'lib'"):
        graph.add("a", "lib")
    with pytest.raises(ValueError, match="'my lib'"):
        graph.add("my lib")
    with pytest.raises(ValueError, match="line 1"):
        parse_rules("just words")
    with pytest.raises(KeyError, match="'nope'"):
        plan(graph, ["nope"])
