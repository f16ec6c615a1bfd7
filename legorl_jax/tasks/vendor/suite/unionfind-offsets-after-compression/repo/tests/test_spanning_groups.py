from linkage import group_by_shared, minimum_spanning_forest


def test_kruskal_picks_lightest_non_cycle_edges():
    edges = [("a", "b", 4), ("a", "c", 1), ("b", "c", 2), ("c", "d", 7), ("b", "d", 5)]
    chosen, total = minimum_spanning_forest(edges)
    assert chosen == [("a", "c", 1), ("b", "c", 2), ("b", "d", 5)]
    assert total == 8


def test_forest_of_disconnected_parts():
    chosen, total = minimum_spanning_forest([(1, 2, 3), (3, 4, 1)], nodes=[5])
    assert total == 4 and len(chosen) == 2


def test_group_records_sharing_keys():
    accounts = [
        {"ann@x.org", "ann@y.org"},
        {"bob@x.org"},
        {"ann@y.org", "a.n@z.org"},
        {"a.n@z.org"},
        {"bob@x.org", "bobby@q.org"},
        {"solo@s.org"},
    ]
    assert group_by_shared(accounts) == [[0, 2, 3], [1, 4], [5]]
