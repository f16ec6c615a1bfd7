"""Constructors: identity, diagonal and conversion from dense lists of lists."""

from __future__ import annotations

from collections.abc import Sequence

from sparsemat.coo import COOMatrix
from sparsemat.csr import CSRMatrix
from sparsemat.shape import check_dense


def identity(n: int) -> CSRMatrix:
    return diag([1.0] * n)


def diag(values: Sequence[float]) -> CSRMatrix:
    n = len(values)
    coo = COOMatrix((n, n))
    for i, v in enumerate(values):
        if v != 0:
            coo.add(i, i, v)
    return coo.to_csr()


def from_dense(rows: Sequence[Sequence[float]]) -> CSRMatrix:
    shape = check_dense(rows)
    coo = COOMatrix(shape)
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            if v != 0:
                coo.add(i, j, v)
    return coo.to_csr()
