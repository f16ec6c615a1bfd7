from buildorder import DependencyGraph, build_stages, parse_rules, plan, topological_order


def assert_valid(graph, order):
    assert sorted(order) == sorted(graph.targets())
    for target in graph.targets():
        for dep in graph.requires(target):
            assert order.index(dep) < order.index(target), (dep, target, order)


def test_dependency_repeated_across_declarations():
    graph = parse_rules("""
        app: lib
        app: lib util
        util: codegen
    """)
    order = topological_order(graph)
    assert_valid(graph, order)
    assert order == ["lib", "codegen", "util", "app"]


def test_dependency_repeated_on_one_line():
    graph = parse_rules("app: lib lib util\nutil: gen")
    assert_valid(graph, topological_order(graph))
    assert build_stages(graph) == [["lib", "gen"], ["util"], ["app"]]


def test_dependents_are_listed_once():
    graph = DependencyGraph()
    graph.add("app", ["lib"])
    graph.add("app", ["lib", "util"])
    graph.add("tests", ["lib"])
    assert graph.required_by("lib") == ["app", "tests"]
    assert graph.requires("app") == ["lib", "util"]


def test_plan_with_repeated_declarations():
    graph = parse_rules("""
        release: build docs
        release: build
        docs: fetch
        fetch: mirror
    """)
    steps = plan(graph, ["release"])
    assert_valid(graph, steps)
    assert steps[-1] == "release"
