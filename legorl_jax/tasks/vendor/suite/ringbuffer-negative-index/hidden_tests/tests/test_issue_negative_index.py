import pytest

from ringlog import RingBuffer


def test_negative_index_before_the_buffer_is_full():
    buf = RingBuffer(5, [10, 20, 30])
    assert buf[-1] == 30
    assert buf[-2] == 20
    assert buf[-3] == 10


def test_negative_index_past_the_oldest_item_raises():
    buf = RingBuffer(5, [10, 20, 30])
    for index in (-4, -5, -6):
        with pytest.raises(IndexError):
            buf[index]


def test_negative_index_after_wrapping_and_popping():
    buf = RingBuffer(4, range(6))
    buf.popleft()
    assert list(buf) == [3, 4, 5]
    assert [buf[-1], buf[-2], buf[-3]] == [5, 4, 3]
    with pytest.raises(IndexError):
        buf[-4]


def test_negative_setitem_on_partial_buffer():
    buf = RingBuffer(8, "abc")
    buf[-1] = "z"
    assert list(buf) == ["a", "b", "z"]


def test_full_buffer_negative_indices_unchanged():
    buf = RingBuffer(3, "abcd")
    assert [buf[-1], buf[-2], buf[-3]] == ["d", "c", "b"]
