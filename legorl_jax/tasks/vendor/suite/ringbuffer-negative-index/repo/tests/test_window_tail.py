import pytest

from ringlog import LogTail, SlidingWindow


def test_window_statistics_follow_the_last_values():
    window = SlidingWindow(3)
    for value in [4, 8, 6, 2]:
        window.add(value)
    assert window.values() == [8, 6, 2]
    assert window.total == 16
    assert window.mean() == pytest.approx(16 / 3)
    assert (window.min(), window.max()) == (2, 8)
    assert window.change() == -6
    assert window.latest == 2


def test_window_rejects_non_numbers():
    with pytest.raises(ValueError, match="'7'"):
        SlidingWindow(2).add("7")
    with pytest.raises(ValueError, match="empty"):
        SlidingWindow(2).mean()


def test_tail_holds_back_partial_lines():
    tail = LogTail(lines=3)
    tail.feed("one\ntwo\nthr")
    assert tail.last() == ["one", "two"]
    tail.feed("ee\r\nfour\n")
    assert tail.last() == ["two", "three", "four"]
    assert tail.total_lines == 4


def test_tail_last_n_and_grep():
    tail = LogTail(lines=10)
    tail.feed("INFO start\nERROR disk full\nINFO retry\nERROR disk full again\n")
    assert tail.last(2) == ["INFO retry", "ERROR disk full again"]
    assert tail.last(0) == []
    assert tail.grep(r"^ERROR") == ["ERROR disk full", "ERROR disk full again"]


def test_flush_emits_the_partial_line():
    tail = LogTail(lines=2)
    tail.feed("a\nb")
    tail.flush()
    assert tail.last() == ["a", "b"]
