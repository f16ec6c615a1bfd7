"""Sparse matrices in coordinate (COO) and compressed sparse row (CSR) formats."""

from sparsemat.build import diag, from_dense, identity
from sparsemat.coo import COOMatrix
from sparsemat.csr import CSRMatrix

__all__ = ["COOMatrix", "CSRMatrix", "diag", "from_dense", "identity"]
__version__ = "0.3.0"
