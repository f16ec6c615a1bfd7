import pytest

from tally import describe, histogram


def test_counts_in_explicit_range():
    hist = histogram([0.5, 1.5, 1.7, 2.2, 3.9], bins=4, range=(0, 4))
    assert hist.counts == [1, 2, 1, 1]
    assert hist.edges == [0, 1, 2, 3, 4]
    assert hist.outside == 0


def test_values_outside_explicit_range_are_counted_separately():
    hist = histogram([-1, 0.5, 1.5, 12], bins=2, range=(0, 2))
    assert hist.counts == [1, 1]
    assert hist.outside == 2


def test_automatic_range_edges_span_the_data():
    hist = histogram([3, 1, 2, 5], bins=4)
    assert hist.edges == [1, 2, 3, 4, 5]


def test_bin_of_locates_values():
    hist = histogram([0.5], bins=4, range=(0, 8))
    assert hist.bin_of(0) == 0
    assert hist.bin_of(7.9) == 3
    assert hist.bin_of(9) is None


def test_render_scales_bars():
    hist = histogram([0.1, 0.2, 1.5], bins=2, range=(0, 2))
    lines = hist.render(width=10).splitlines()
    assert lines[0].endswith("#" * 10) and lines[1].endswith("#" * 5)


def test_bad_bins_and_range():
    with pytest.raises(ValueError, match="0"):
        histogram([1], bins=0)
    with pytest.raises(ValueError, match=r"\(2, 1\)"):
        histogram([1], range=(2, 1))


def test_describe_summary_and_table():
    summary = describe([1, 2, 3, 4, 100])
    assert (summary.count, summary.min, summary.median, summary.max) == (5, 1, 3, 100)
    assert summary.q1 == 2 and summary.q3 == 4
    assert summary.mean == 22
    assert "median" in summary.table() and "100" in summary.table()
