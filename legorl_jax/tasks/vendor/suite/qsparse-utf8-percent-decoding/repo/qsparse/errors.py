"""The error raised for malformed query strings in strict mode and for limits."""


class QueryError(ValueError):
    pass
