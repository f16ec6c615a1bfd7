import pytest

from sparsemat import COOMatrix, diag, from_dense, identity

A = [[1, 0, 2], [0, 0, 3], [4, 5, 0]]
B = [[0, 1], [2, 0], [0, 3]]


def dense_matmul(x, y):
    return [[sum(x[i][k] * y[k][j] for k in range(len(y))) for j in range(len(y[0]))]
            for i in range(len(x))]


def test_from_dense_round_trip_and_structure():
    m = from_dense(A)
    assert m.to_dense() == A
    assert m.nnz == 5
    assert m.indptr == [0, 2, 3, 5]
    assert m.indices == [0, 2, 2, 0, 1]


def test_element_access():
    m = from_dense(A)
    assert m[0, 2] == 2 and m[2, 1] == 5 and m[1, 0] == 0
    with pytest.raises(IndexError):
        m[3, 0]


def test_matvec_and_matmul_match_dense():
    m = from_dense(A)
    assert m @ [1, 2, 3] == [7.0, 9.0, 14.0]
    assert (m @ from_dense(B)).to_dense() == dense_matmul(A, B)
    with pytest.raises(ValueError, match="length 2"):
        m @ [1, 2]


def test_addition_merges_rows_and_drops_cancellations():
    m = from_dense(A) + from_dense([[0, 1, -2], [0, 0, 0], [1, 0, 0]])
    assert m.to_dense() == [[1, 1, 0], [0, 0, 3], [5, 5, 0]]
    assert m.nnz == 5


def test_transpose_identity_diag_and_scale():
    m = from_dense(A)
    assert m.transpose().to_dense() == [list(col) for col in zip(*A)]
    assert (identity(3) @ m) == m
    assert diag([2, 0, 1]).to_dense() == [[2, 0, 0], [0, 0, 0], [0, 0, 1]]
    assert m.scale(0.5)[2, 0] == 2.0


def test_coo_conversion_orders_columns_within_rows():
    coo = COOMatrix((2, 4))
    for col in (3, 0, 2):
        coo.add(1, col, col + 1)
    csr = coo.to_csr()
    assert csr.row(1) == [(0, 1), (2, 3), (3, 4)]
    assert csr.row(0) == []


def test_ragged_dense_input_is_rejected():
    with pytest.raises(ValueError, match="row 1 has 1 columns"):
        from_dense([[1, 2], [3]])
