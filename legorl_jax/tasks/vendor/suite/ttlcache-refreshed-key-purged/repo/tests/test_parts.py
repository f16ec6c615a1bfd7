from ttlcache.expiry import ExpiryQueue
from ttlcache.lru import LRUStore


def test_expiry_queue_pops_due_keys_in_deadline_order():
    queue = ExpiryQueue()
    queue.schedule("b", 20)
    queue.schedule(1, 10)
    queue.schedule("c", 30)
    assert queue.next_deadline() == 10
    assert queue.pop_due(20) == [1, "b"]
    assert len(queue) == 1


def test_lru_store_peek_does_not_change_recency():
    store = LRUStore()
    store.put("a", 1)
    store.put("b", 2)
    store.peek("a")
    assert store.pop_oldest() == ("a", 1)
    store.put("c", 3)
    store.get("b")
    assert list(store) == ["c", "b"]
