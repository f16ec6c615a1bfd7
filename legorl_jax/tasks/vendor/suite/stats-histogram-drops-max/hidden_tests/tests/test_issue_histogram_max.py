from tally import histogram


def test_automatic_range_counts_every_value():
    data = [1, 2, 2, 3, 9]
    hist = histogram(data, bins=4)
    assert hist.total == len(data)
    assert hist.counts == [3, 1, 0, 1]
    assert hist.outside == 0


def test_value_on_the_upper_edge_of_explicit_range_is_in_the_last_bin():
    hist = histogram([0, 1, 2, 10], bins=5, range=(0, 10))
    assert hist.counts == [2, 1, 0, 0, 1]
    assert hist.outside == 0


def test_values_beyond_the_upper_edge_stay_outside():
    hist = histogram([10, 10.0001, 11], bins=2, range=(0, 10))
    assert hist.counts == [0, 1]
    assert hist.outside == 2


def test_histogram_agrees_with_bin_of():
    data = [0.0, 0.25, 0.5, 0.75, 1.0, 0.999999]
    hist = histogram(data, bins=4, range=(0, 1))
    expected = [0, 0, 0, 0]
    for x in data:
        expected[hist.bin_of(x)] += 1
    assert hist.counts == expected


def test_constant_sample_lands_in_one_bin():
    hist = histogram([3, 3, 3], bins=3)
    assert hist.total == 3


def test_interior_edges_belong_to_the_upper_bin():
    hist = histogram([1, 2, 3], bins=4, range=(0, 4))
    assert hist.counts == [0, 1, 1, 1]
