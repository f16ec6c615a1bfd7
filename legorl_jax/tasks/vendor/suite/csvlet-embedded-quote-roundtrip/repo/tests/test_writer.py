import pytest

from csvlet import Dialect, DialectError, format_row, write_rows
from csvlet.dialect import QUOTE_NONNUMERIC


def test_plain_values_are_not_quoted():
    assert format_row(["a", 1, 2.5, None, True]) == "a,1,2.5,,true"


def test_field_with_delimiter_is_quoted():
    assert format_row(["Widget, large", 3]) == '"Widget, large",3'


def test_field_with_newline_is_quoted():
    assert write_rows([["a\nb"]]) == '"a\nb"\n'


def test_nonnumeric_quoting_leaves_numbers_bare():
    assert format_row(["x", 2], Dialect(quoting=QUOTE_NONNUMERIC)) == '"x",2'


def test_crlf_terminator():
    assert write_rows([["a"], ["b"]], Dialect(lineterminator="\r\n")) == "a\r\nb\r\n"


def test_inconsistent_dialect_is_rejected():
    with pytest.raises(DialectError, match="differ"):
        Dialect(delimiter='"')
