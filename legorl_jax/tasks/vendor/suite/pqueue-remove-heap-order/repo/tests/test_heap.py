import pytest

from prioq import DuplicateItemError, EmptyQueueError, IndexedHeap


def test_pop_returns_keys_in_ascending_order():
    heap = IndexedHeap()
    for item, key in [("e", 5), ("b", 2), ("d", 4), ("a", 1), ("c", 3)]:
        heap.push(item, key)
    heap.check()
    assert [heap.pop()[0] for _ in range(5)] == ["a", "b", "c", "d", "e"]


def test_change_key_moves_entry_both_ways():
    heap = IndexedHeap()
    for i in range(10):
        heap.push(i, i)
    heap.change_key(9, -1)
    heap.change_key(0, 100)
    heap.check()
    assert heap.peek() == (9, -1)
    assert [heap.pop()[0] for _ in range(10)][-1] == 0


def test_remove_last_and_only_entries():
    heap = IndexedHeap()
    heap.push("x", 1)
    heap.push("y", 2)
    assert heap.remove("y") == 2
    assert heap.remove("x") == 1
    assert len(heap) == 0
    with pytest.raises(EmptyQueueError):
        heap.pop()


def test_duplicate_items_are_rejected():
    heap = IndexedHeap()
    heap.push("x", 1)
    with pytest.raises(DuplicateItemError, match="'x'"):
        heap.push("x", 2)
