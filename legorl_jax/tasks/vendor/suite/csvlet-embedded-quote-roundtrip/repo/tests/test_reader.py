import pytest

from csvlet import CSVSyntaxError, Dialect, read_rows


def test_simple_rows_are_split_on_commas():
    assert read_rows("a,b,c\n1,2,3\n") == [["a", "b", "c"], ["1", "2", "3"]]


def test_last_row_without_newline_is_kept():
    assert read_rows("a,b\n1,2") == [["a", "b"], ["1", "2"]]


def test_quoted_field_keeps_delimiter_and_newline():
    assert read_rows('x,"a, b\nc"\n') == [["x", "a, b\nc"]]


def test_doubled_quote_inside_quoted_field_is_one_quote():
    assert read_rows('"he said ""no"" twice"\n') == [['he said "no" twice']]


def test_crlf_line_endings_are_accepted():
    assert read_rows("a,b\r\n1,2\r\n") == [["a", "b"], ["1", "2"]]


def test_blank_lines_are_skipped_by_default():
    assert read_rows("a\n\nb\n") == [["a"], ["b"]]
    assert read_rows("a\n\nb\n", Dialect(skip_blank_lines=False)) == [["a"], [""], ["b"]]


def test_unterminated_quote_reports_its_starting_line():
    with pytest.raises(CSVSyntaxError, match="line 2"):
        read_rows('ok\n"never closed\nmore\n')


def test_tab_dialect_by_name():
    assert read_rows("a\tb\n", "excel-tab") == [["a", "b"]]
