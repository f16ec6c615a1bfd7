import pytest

from sparsemat import COOMatrix


def test_coo_dense_view_sums_duplicates():
    coo = COOMatrix((2, 2))
    coo.add(0, 1, 1.5)
    coo.add(0, 1, 2.5)
    coo.add(1, 0, -1)
    assert len(coo) == 3
    assert coo.to_dense() == [[0.0, 4.0], [-1.0, 0.0]]


def test_transpose_swaps_coordinates():
    coo = COOMatrix((2, 3))
    coo.add(0, 2, 7)
    assert coo.transpose().to_dense() == [[0, 0], [0, 0], [7, 0]]


def test_out_of_range_and_bad_shapes():
    coo = COOMatrix((2, 2))
    with pytest.raises(IndexError, match="row index 2"):
        coo.add(2, 0, 1)
    with pytest.raises(TypeError, match="float"):
        coo.add(0, 1.0, 1)
    with pytest.raises(ValueError, match=r"\(2, -1\)"):
        COOMatrix((2, -1))
