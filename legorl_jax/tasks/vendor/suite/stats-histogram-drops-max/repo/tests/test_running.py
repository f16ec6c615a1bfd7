import math

import pytest

from tally import RunningStats


def test_mean_and_variance_match_textbook_values():
    stats = RunningStats([2, 4, 4, 4, 5, 5, 7, 9])
    assert stats.count == 8
    assert stats.mean == 5.0
    assert stats.stdev(ddof=0) == pytest.approx(2.0)
    assert stats.variance() == pytest.approx(32 / 7)
    assert (stats.min, stats.max) == (2, 9)


def test_large_offset_does_not_lose_precision():
    stats = RunningStats([1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16])
    assert stats.variance() == pytest.approx(30.0, rel=1e-12)


def test_merge_equals_single_pass():
    left, right = RunningStats([1, 2, 3]), RunningStats([10, 20])
    merged = left.merge(right)
    single = RunningStats([1, 2, 3, 10, 20])
    assert merged.count == 5
    assert merged.mean == pytest.approx(single.mean)
    assert merged.variance() == pytest.approx(single.variance())
    assert (merged.min, merged.max) == (1, 20)


def test_invalid_input_and_too_few_values():
    with pytest.raises(TypeError, match="'3'"):
        RunningStats(["3"])
    with pytest.raises(ValueError, match="NaN"):
        RunningStats([math.nan])
    with pytest.raises(ValueError, match="ddof=1"):
        RunningStats([1]).variance()
