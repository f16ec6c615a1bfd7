"""COOMatrix: a list of (row, col, value) triplets, the format for assembling matrices.

Several triplets may name the same position; they stand for the sum of their values (the usual
convention of assembly code). Nothing is merged until the matrix is converted or read.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparsemat.shape import check_index, check_shape


class COOMatrix:
    def __init__(self, shape: tuple[int, int]) -> None:
        self.shape = check_shape(shape)
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.values: list[float] = []

    def add(self, row: int, col: int, value: float) -> None:
        check_index(self.shape, row, col)
        self.rows.append(row)
        self.cols.append(col)
        self.values.append(value)

    def __len__(self) -> int:
        """Number of stored triplets (duplicates included)."""
        return len(self.values)

    def triplets(self) -> Iterator[tuple[int, int, float]]:
        return zip(self.rows, self.cols, self.values)

    def to_dense(self) -> list[list[float]]:
        n, m = self.shape
        dense = [[0.0] * m for _ in range(n)]
        for i, j, v in self.triplets():
            dense[i][j] += v
        return dense

    def transpose(self) -> COOMatrix:
        out = COOMatrix((self.shape[1], self.shape[0]))
        out.rows, out.cols, out.values = list(self.cols), list(self.rows), list(self.values)
        return out

    def to_csr(self):
        from sparsemat.csr import CSRMatrix

        return CSRMatrix.from_coo(self)
