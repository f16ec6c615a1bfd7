import pytest

from routes import NoPath, WeightedGraph, parse_network, reachable_within, shortest_path, shortest_paths

CITY = """
    A - B : 4
    A - C : 1
    C - B : 2
    B - D : 5
"""


def test_readme_example():
    g = parse_network(CITY)
    path = shortest_path(g, "A", "D")
    assert path.nodes == ["A", "C", "B", "D"]
    assert path.cost == 8
    assert len(path) == 3
    assert path.edges() == [("A", "C"), ("C", "B"), ("B", "D")]


def test_all_distances_from_a_source():
    dist, prev = shortest_paths(parse_network(CITY), "A")
    assert dist == {"A": 0, "B": 3, "C": 1, "D": 8}
    assert prev["B"] == "C"


def test_path_along_a_tree_is_unique():
    g = WeightedGraph.from_edges([(1, 2, 1), (2, 3, 1), (2, 4, 7), (4, 5, 1)])
    assert shortest_path(g, 1, 5).nodes == [1, 2, 4, 5]
    assert shortest_path(g, 5, 3).cost == 9


def test_one_way_streets_are_respected():
    g = parse_network("A -> B : 1\nB -> C : 1\nC -> A : 1")
    assert shortest_path(g, "A", "C").cost == 2
    assert shortest_path(g, "C", "B").nodes == ["C", "A", "B"]


def test_unreachable_and_unknown_nodes():
    g = WeightedGraph.from_edges([("a", "b", 1)])
    g.add_node("z")
    with pytest.raises(NoPath, match="'a' to 'z'"):
        shortest_path(g, "a", "z")
    with pytest.raises(KeyError, match="'q'"):
        shortest_path(g, "a", "q")


def test_source_equals_target():
    g = WeightedGraph.from_edges([("a", "b", 1)])
    assert shortest_path(g, "a", "a") == shortest_path(g, "a", "a")
    assert shortest_path(g, "a", "a").cost == 0


def test_reachable_within_budget():
    g = parse_network(CITY)
    assert reachable_within(g, "A", 3) == {"A": 0, "C": 1, "B": 3}
    with pytest.raises(ValueError):
        reachable_within(g, "A", -1)
