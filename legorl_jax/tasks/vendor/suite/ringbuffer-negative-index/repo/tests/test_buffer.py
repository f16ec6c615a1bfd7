import pytest

from ringlog import RingBuffer


def test_keeps_newest_items_and_counts_dropped():
    buf = RingBuffer(3)
    buf.extend([1, 2, 3, 4, 5])
    assert list(buf) == [3, 4, 5]
    assert buf.dropped == 2
    assert buf.full


def test_positive_indices_start_at_the_oldest_item():
    buf = RingBuffer(4, [1, 2])
    assert buf[0] == 1 and buf[1] == 2
    with pytest.raises(IndexError):
        buf[2]


def test_negative_indices_on_a_full_wrapped_buffer():
    buf = RingBuffer(3, "abcde")
    assert buf[-1] == "e"
    assert buf[-3] == "c"
    with pytest.raises(IndexError):
        buf[-4]


def test_slices_follow_list_semantics():
    buf = RingBuffer(5, range(8))
    assert buf[1:3] == [4, 5]
    assert buf[::-2] == [7, 5, 3]
    assert buf[-2:] == [6, 7]


def test_pop_and_popleft():
    buf = RingBuffer(3, [1, 2, 3, 4])
    assert buf.popleft() == 2
    assert buf.pop() == 4
    assert list(buf) == [3]
    buf.extend([5, 6, 7])
    assert list(buf) == [5, 6, 7]


def test_setitem_replaces_in_place():
    buf = RingBuffer(2, [1, 2, 3])
    buf[0] = 20
    assert list(buf) == [20, 3]


def test_clear_empties_buffer():
    buf = RingBuffer(2, [1, 2])
    buf.clear()
    assert len(buf) == 0 and list(buf) == []
    with pytest.raises(IndexError):
        buf.newest


def test_bad_capacity_and_index_types():
    with pytest.raises(ValueError, match="0"):
        RingBuffer(0)
    with pytest.raises(TypeError, match="str"):
        RingBuffer(2, [1])["0"]
