"""qsparse: query strings to multi-valued mappings and back."""

from qsparse.build import build_query
from qsparse.errors import QueryError
from qsparse.multidict import QueryDict
from qsparse.nested import parse_nested
from qsparse.parse import parse_pairs, parse_query
from qsparse.percent import percent_decode, percent_encode

__all__ = [
    "QueryDict",
    "QueryError",
    "build_query",
    "parse_nested",
    "parse_pairs",
    "parse_query",
    "percent_decode",
    "percent_encode",
]
