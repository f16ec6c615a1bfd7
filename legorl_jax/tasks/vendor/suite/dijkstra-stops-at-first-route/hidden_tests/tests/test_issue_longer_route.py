import random

from routes import WeightedGraph, parse_network, shortest_path, shortest_paths


def test_cheaper_route_found_later_wins():
    g = parse_network("""
        home - bridge : 1
        bridge - office : 10
        home - tunnel : 2
        tunnel - office : 3
    """)
    path = shortest_path(g, "home", "office")
    assert path.cost == 5
    assert path.nodes == ["home", "tunnel", "office"]


def test_direct_but_expensive_edge_is_not_taken():
    g = WeightedGraph.from_edges([("a", "z", 100), ("a", "b", 1), ("b", "c", 1), ("c", "z", 1)])
    assert shortest_path(g, "a", "z").nodes == ["a", "b", "c", "z"]
    assert shortest_path(g, "a", "z").cost == 3


def test_single_queries_agree_with_all_distances_on_random_graphs():
    rng = random.Random(7)
    for _ in range(20):
        n = 12
        g = WeightedGraph(directed=rng.random() < 0.5)
        for node in range(n):
            g.add_node(node)
        for _ in range(30):
            g.add_edge(rng.randrange(n), rng.randrange(n), rng.randint(0, 20))
        for source in range(0, n, 3):
            dist, _ = shortest_paths(g, source)
            for target, d in dist.items():
                path = shortest_path(g, source, target)
                assert path.cost == d, (source, target)
                assert sum(g.weight(u, v) for u, v in path.edges()) == d


def test_zero_weight_edges():
    g = WeightedGraph.from_edges([("s", "t", 1), ("s", "x", 0), ("x", "t", 0)])
    assert shortest_path(g, "s", "t").cost == 0
