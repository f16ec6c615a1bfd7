import pytest

from routes import WeightedGraph, parse_network


def test_undirected_edges_go_both_ways():
    g = WeightedGraph.from_edges([("a", "b", 2), ("b", "c", 3)])
    assert sorted(n for n, _ in g.neighbors("b")) == ["a", "c"]
    assert g.edge_count() == 2
    assert g.weight("c", "b") == 3


def test_parallel_edges_are_kept():
    g = WeightedGraph.from_edges([("a", "b", 5), ("a", "b", 2)])
    assert g.weight("a", "b") == 2
    assert g.edge_count() == 2


def test_invalid_weights_are_rejected():
    g = WeightedGraph()
    with pytest.raises(ValueError, match="-1"):
        g.add_edge("a", "b", -1)
    with pytest.raises(ValueError, match="nan"):
        g.add_edge("a", "b", float("nan"))
    with pytest.raises(TypeError, match="'3'"):
        g.add_edge("a", "b", "3")


def test_parse_network_text():
    g = parse_network("""
        # city map
        A - B : 4
        A -> C : 1.5
    """)
    assert g.directed
    assert g.weight("A", "C") == 1.5
    assert g.weight("B", "A") == 4
    with pytest.raises(KeyError):
        g.weight("C", "A")


def test_parse_network_reports_bad_lines():
    with pytest.raises(ValueError, match="line 2"):
        parse_network("A - B : 1\nA = B")
