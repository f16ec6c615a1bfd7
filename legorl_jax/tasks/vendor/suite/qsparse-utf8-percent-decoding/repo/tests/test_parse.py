import pytest

from qsparse import QueryError, parse_pairs, parse_query, percent_decode


def test_pairs_in_order_with_plus_as_space():
    assert parse_pairs("?q=hello+world&page=2") == [("q", "hello world"), ("page", "2")]


def test_ascii_escapes_are_decoded():
    assert parse_pairs("a%26b=c%3Dd&x=100%25") == [("a&b", "c=d"), ("x", "100%")]


def test_blank_values_dropped_unless_kept():
    assert parse_pairs("a=&b=1&c") == [("b", "1")]
    assert parse_pairs("a=&b=1&c", keep_blank_values=True) == [("a", ""), ("b", "1"), ("c", "")]


def test_multi_values_and_last_wins():
    q = parse_query("tag=a&tag=b&x=1")
    assert q.getlist("tag") == ["a", "b"]
    assert q["tag"] == "b"
    assert q.to_dict(multi=True) == {"tag": ["a", "b"], "x": ["1"]}


def test_semicolon_separator_is_opt_in():
    assert parse_pairs("a=1;b=2") == [("a", "1;b=2")]
    assert parse_pairs("a=1;b=2", separator="&;") == [("a", "1"), ("b", "2")]


def test_malformed_escape_kept_or_rejected():
    assert percent_decode("100%") == "100%"
    assert percent_decode("%zz") == "%zz"
    with pytest.raises(QueryError, match="invalid percent-escape '%zz' at position 0"):
        percent_decode("%zz", strict=True)


def test_max_fields_limit():
    with pytest.raises(QueryError, match="max_fields=2"):
        parse_pairs("a=1&b=2&c=3", max_fields=2)
