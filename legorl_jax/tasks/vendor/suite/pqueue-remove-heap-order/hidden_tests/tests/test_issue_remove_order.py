import random

from prioq import IndexedHeap, PriorityQueue


def test_pop_order_survives_removing_a_middle_item():
    queue = PriorityQueue()
    for priority in [1, 4, 2, 5, 6, 7, 3]:
        queue.push(f"ticket-{priority}", priority)
    assert queue.remove("ticket-5") == 5
    assert [p for _, p in queue.drain()] == [1, 2, 3, 4, 6, 7]


def test_max_queue_pop_order_survives_removal():
    queue = PriorityQueue(order="max")
    for priority in [7, 4, 6, 3, 2, 1, 5]:
        queue.push(priority, priority)
    queue.remove(3)
    assert [p for _, p in queue.drain()] == [7, 6, 5, 4, 2, 1]


def test_heap_invariant_holds_after_every_removal():
    rng = random.Random(1234)
    heap = IndexedHeap()
    for item in range(200):
        heap.push(item, rng.randrange(1000))
    alive = set(range(200))
    for item in rng.sample(range(200), 150):
        heap.remove(item)
        alive.discard(item)
        heap.check()
    assert sorted(item for item, _ in heap) == sorted(alive)


def test_random_mix_of_operations_matches_a_sorted_reference():
    rng = random.Random(99)
    queue = PriorityQueue()
    reference: dict[int, tuple[int, int]] = {}
    seq = 0
    for step in range(2000):
        op = rng.random()
        if op < 0.45 or not reference:
            item = step
            priority = rng.randrange(50)
            queue.push(item, priority)
            reference[item] = (priority, seq)
        elif op < 0.7:
            item = rng.choice(sorted(reference))
            assert queue.remove(item) == reference.pop(item)[0]
        elif op < 0.85:
            item = rng.choice(sorted(reference))
            priority = rng.randrange(50)
            queue.update(item, priority)
            reference[item] = (priority, seq)
        else:
            expected = min(reference, key=lambda k: reference[k])
            assert queue.pop() == (expected, reference.pop(expected)[0])
        seq += 1
    expected_order = sorted(reference, key=lambda k: reference[k])
    assert [item for item, _ in queue.drain()] == expected_order
