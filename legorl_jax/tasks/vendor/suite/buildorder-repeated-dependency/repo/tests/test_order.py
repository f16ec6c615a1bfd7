import pytest

from buildorder import CycleError, DependencyGraph, build_stages, parse_rules, topological_order

RULES = """
app: lib util
lib: core
util: core
"""


def test_readme_order_and_stages():
    graph = parse_rules(RULES)
    assert topological_order(graph) == ["core", "lib", "util", "app"]
    assert build_stages(graph) == [["core"], ["lib", "util"], ["app"]]


def test_ties_follow_declaration_order():
    graph = DependencyGraph()
    for name in ["zeta", "alpha", "mid"]:
        graph.add(name)
    assert topological_order(graph) == ["zeta", "alpha", "mid"]


def test_dependencies_declared_in_pieces_accumulate():
    graph = DependencyGraph()
    graph.add("app", ["lib"])
    graph.add("app", ["util"])
    graph.add("util", ["gen"])
    order = topological_order(graph)
    assert order.index("gen") < order.index("util") < order.index("app")
    assert order.index("lib") < order.index("app")
    assert graph.requires("app") == ["lib", "util"]


def test_every_target_after_its_dependencies_in_a_diamond_chain():
    graph = parse_rules("""
        d: b c
        b: a
        c: a
        e: d a
    """)
    order = topological_order(graph)
    for target in graph.targets():
        for dep in graph.requires(target):
            assert order.index(dep) < order.index(target)
    assert build_stages(graph) == [["a"], ["b", "c"], ["d"], ["e"]]


def test_cycle_is_reported_with_its_path():
    graph = parse_rules("a: b\nb: c\nc: a\nd: a")
    with pytest.raises(CycleError, match="a -> b -> c -> a") as err:
        topological_order(graph)
    assert err.value.cycle == ["a", "b", "c", "a"]
    with pytest.raises(CycleError):
        build_stages(graph)
