import pytest

from tally import iqr, median, quantile


def test_linear_interpolation_matches_numpy_default():
    data = [1, 2, 3, 4]
    assert quantile(data, 0.5) == 2.5
    assert quantile(data, 0.25) == 1.75
    assert quantile(data, 0) == 1 and quantile(data, 1) == 4


def test_discrete_methods():
    data = [10, 20, 30, 40, 50]
    assert quantile(data, 0.3, method="lower") == 20
    assert quantile(data, 0.3, method="higher") == 30
    assert quantile(data, 0.3, method="nearest") == 20
    assert quantile(data, 0.5, method="higher") == 30


def test_median_and_iqr_of_unsorted_data():
    assert median([5, 1, 4, 2, 3]) == 3
    assert iqr([7, 1, 3, 5]) == 3


def test_bad_arguments():
    with pytest.raises(ValueError, match="1.5"):
        quantile([1], 1.5)
    with pytest.raises(ValueError, match="'mean'"):
        quantile([1], 0.5, method="mean")
    with pytest.raises(ValueError, match="empty"):
        median([])
