from sparsemat import COOMatrix


def assembled():
    # Two 1-D "elements" sharing node 1, as in finite-element assembly.
    coo = COOMatrix((3, 3))
    for a, b in ((0, 1), (1, 2)):
        coo.add(a, a, 1.0)
        coo.add(a, b, -1.0)
        coo.add(b, a, -1.0)
        coo.add(b, b, 1.0)
    return coo


def test_converted_matrix_sums_repeated_positions():
    csr = assembled().to_csr()
    assert csr[1, 1] == 2.0
    assert csr[0, 0] == 1.0 and csr[2, 2] == 1.0
    assert csr.to_dense() == [[1.0, -1.0, 0.0], [-1.0, 2.0, -1.0], [0.0, -1.0, 1.0]]


def test_converted_matrix_matches_the_coo_dense_view():
    coo = COOMatrix((2, 3))
    for value in (1, 2, 3):
        coo.add(0, 2, value)
    coo.add(1, 0, 5)
    coo.add(0, 2, -10)
    assert coo.to_csr().to_dense() == coo.to_dense()


def test_one_stored_entry_per_position():
    csr = assembled().to_csr()
    assert csr.nnz == 7
    for i in range(3):
        cols = [j for j, _ in csr.row(i)]
        assert cols == sorted(set(cols))


def test_products_and_sums_of_assembled_matrices():
    csr = assembled().to_csr()
    assert csr @ [1.0, 2.0, 3.0] == [-1.0, 0.0, 1.0]
    doubled = csr + csr
    assert doubled[1, 1] == 4.0
    assert doubled.to_dense() == [[2 * v for v in row] for row in csr.to_dense()]
    assert csr.transpose()[1, 1] == 2.0
