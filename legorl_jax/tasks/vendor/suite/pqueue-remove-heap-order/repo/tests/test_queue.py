import pytest

from prioq import PriorityQueue


def test_lowest_priority_first_and_fifo_ties():
    queue = PriorityQueue([("a", 2), ("b", 1), ("c", 2), ("d", 1)])
    assert [item for item, _ in queue.drain()] == ["b", "d", "a", "c"]


def test_max_order_reverses_priorities():
    queue = PriorityQueue([("low", 1), ("high", 9), ("mid", 5)], order="max")
    assert queue.pop() == ("high", 9)
    assert queue.peek() == ("mid", 5)


def test_update_reprioritises_items():
    queue = PriorityQueue([("report", 3), ("prod", 1), ("lunch", 2)])
    queue.update("report", 0)
    assert queue.priority("report") == 0
    assert queue.pop() == ("report", 0)
    queue.push_or_update("lunch", 5)
    queue.push_or_update("coffee", 4)
    assert queue.drain() == [("prod", 1), ("coffee", 4), ("lunch", 5)]


def test_remove_returns_priority_and_forgets_item():
    queue = PriorityQueue([("a", 1), ("b", 2)])
    assert queue.remove("a") == 1
    assert "a" not in queue
    with pytest.raises(KeyError):
        queue.remove("a")
    assert queue.drain() == [("b", 2)]


def test_peek_n_does_not_consume():
    queue = PriorityQueue([("a", 3), ("b", 1), ("c", 2)])
    assert queue.peek_n(2) == [("b", 1), ("c", 2)]
    assert len(queue) == 3


def test_invalid_priorities_and_orders_are_rejected():
    with pytest.raises(ValueError, match="'desc'"):
        PriorityQueue(order="desc")
    with pytest.raises(TypeError, match="'high'"):
        PriorityQueue().push("x", "high")
    with pytest.raises(ValueError, match="NaN"):
        PriorityQueue().push("x", float("nan"))
