from linkage import DisjointSet


def test_union_find_basics():
    sets = DisjointSet("abcde")
    assert sets.count == 5
    assert sets.union("a", "b")
    assert sets.union("c", "d")
    assert not sets.union("b", "a")
    assert sets.union("a", "d")
    assert sets.connected("b", "c")
    assert not sets.connected("a", "e")
    assert sets.count == 2
    assert sets.size_of("d") == 4


def test_elements_are_added_on_first_use():
    sets = DisjointSet()
    sets.union(1, 2)
    assert 1 in sets and 2 in sets and len(sets) == 2


def test_groups_keep_insertion_order():
    sets = DisjointSet([1, 2, 3, 4, 5, 6])
    sets.union(4, 1)
    sets.union(6, 3)
    assert sets.groups() == [[1, 4], [2], [3, 6], [5]]


def test_long_chain_is_flattened():
    sets = DisjointSet(range(1000))
    for i in range(999):
        sets.union(i, i + 1)
    assert sets.count == 1
    assert sets.size_of(0) == 1000
