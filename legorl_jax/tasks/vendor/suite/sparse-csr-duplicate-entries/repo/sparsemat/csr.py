"""CSRMatrix: compressed sparse rows.

Row i's entries are indices[indptr[i]:indptr[i+1]] (column numbers, strictly increasing) and the
matching slice of data. Every operation returns a new matrix and keeps that invariant, which `get`
(binary search) and `__add__` (sorted merge of rows) rely on.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from sparsemat.shape import check_index, check_shape, check_vector


class CSRMatrix:
    def __init__(self, shape, indptr: list[int], indices: list[int], data: list[float]) -> None:
        self.shape = check_shape(shape)
        if len(indptr) != self.shape[0] + 1:
            raise ValueError(f"indptr must have {self.shape[0] + 1} entries, got {len(indptr)}")
        if len(indices) != len(data) or indptr[-1] != len(data):
            raise ValueError("indices, data and indptr[-1] must agree on the number of entries")
        self.indptr, self.indices, self.data = indptr, indices, data

    @classmethod
    def from_coo(cls, coo) -> CSRMatrix:
        n, _ = coo.shape
        order = sorted(range(len(coo)), key=lambda k: (coo.rows[k], coo.cols[k]))
        indptr = [0] * (n + 1)
        indices: list[int] = []
        data: list[float] = []
        for k in order:
            indices.append(coo.cols[k])
            data.append(coo.values[k])
            indptr[coo.rows[k] + 1] += 1
        for i in range(n):
            indptr[i + 1] += indptr[i]
        return cls(coo.shape, indptr, indices, data)

    @property
    def nnz(self) -> int:
        return len(self.data)

    def row(self, i: int) -> list[tuple[int, float]]:
        """(column, value) pairs of row i."""
        start, end = self.indptr[i], self.indptr[i + 1]
        return list(zip(self.indices[start:end], self.data[start:end]))

    def __getitem__(self, position: tuple[int, int]) -> float:
        i, j = position
        check_index(self.shape, i, j)
        start, end = self.indptr[i], self.indptr[i + 1]
        k = bisect_left(self.indices, j, start, end)
        if k < end and self.indices[k] == j:
            return self.data[k]
        return 0.0

    def to_dense(self) -> list[list[float]]:
        n, m = self.shape
        dense = [[0.0] * m for _ in range(n)]
        for i in range(n):
            for j, v in self.row(i):
                dense[i][j] = v
        return dense

    def matvec(self, vector: Sequence[float]) -> list[float]:
        check_vector(vector, self.shape[1])
        out = []
        for i in range(self.shape[0]):
            total = 0.0
            for k in range(self.indptr[i], self.indptr[i + 1]):
                total += self.data[k] * vector[self.indices[k]]
            out.append(total)
        return out

    def __matmul__(self, other):
        if isinstance(other, CSRMatrix):
            return self.matmul(other)
        return self.matvec(other)

    def matmul(self, other: CSRMatrix) -> CSRMatrix:
        if self.shape[1] != other.shape[0]:
            raise ValueError(f"cannot multiply {self.shape} by {other.shape}")
        indptr, indices, data = [0], [], []
        for i in range(self.shape[0]):
            acc: dict[int, float] = {}
            for j, a in self.row(i):
                for k, b in other.row(j):
                    acc[k] = acc.get(k, 0.0) + a * b
            for k in sorted(acc):
                if acc[k] != 0:
                    indices.append(k)
                    data.append(acc[k])
            indptr.append(len(data))
        return CSRMatrix((self.shape[0], other.shape[1]), indptr, indices, data)

    def __add__(self, other: CSRMatrix) -> CSRMatrix:
        if not isinstance(other, CSRMatrix):
            return NotImplemented
        if self.shape != other.shape:
            raise ValueError(f"cannot add {self.shape} and {other.shape}")
        indptr, indices, data = [0], [], []
        for i in range(self.shape[0]):
            left, right = self.row(i), other.row(i)
            a = b = 0
            while a < len(left) or b < len(right):
                if b == len(right) or (a < len(left) and left[a][0] < right[b][0]):
                    col, value = left[a]
                    a += 1
                elif a == len(left) or right[b][0] < left[a][0]:
                    col, value = right[b]
                    b += 1
                else:
                    col, value = left[a][0], left[a][1] + right[b][1]
                    a += 1
                    b += 1
                if value != 0:
                    indices.append(col)
                    data.append(value)
            indptr.append(len(data))
        return CSRMatrix(self.shape, indptr, indices, data)

    def scale(self, factor: float) -> CSRMatrix:
        return CSRMatrix(self.shape, list(self.indptr), list(self.indices), [v * factor for v in self.data])

    def transpose(self) -> CSRMatrix:
        from sparsemat.coo import COOMatrix

        coo = COOMatrix((self.shape[1], self.shape[0]))
        for i in range(self.shape[0]):
            for j, v in self.row(i):
                coo.add(j, i, v)
        return CSRMatrix.from_coo(coo)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CSRMatrix):
            return NotImplemented
        return self.shape == other.shape and self.to_dense() == other.to_dense()
