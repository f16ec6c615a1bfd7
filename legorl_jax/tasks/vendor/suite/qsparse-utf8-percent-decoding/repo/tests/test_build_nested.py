import pytest

from qsparse import QueryDict, QueryError, build_query, parse_nested, parse_pairs


def test_build_escapes_reserved_characters():
    assert build_query([("q", "a & b=c"), ("n", 5)]) == "q=a+%26+b%3Dc&n=5"


def test_build_expands_lists_and_sorts_stably():
    assert build_query({"b": ["2", "1"], "a": True}, sort=True) == "a=true&b=2&b=1"


def test_ascii_round_trip():
    pairs = [("path", "/a/b?c"), ("expr", "1+1=2"), ("pct", "50%")]
    assert parse_pairs(build_query(pairs)) == pairs


def test_nested_keys_build_dicts_and_lists():
    assert parse_nested("user[name]=ann&user[roles][]=admin&user[roles][]=dev&page=1") == {
        "user": {"name": "ann", "roles": ["admin", "dev"]},
        "page": "1",
    }


def test_nested_conflicts_are_errors():
    with pytest.raises(QueryError, match="mixes"):
        parse_nested("a=1&a[b]=2")


def test_setlist_keeps_first_position():
    q = QueryDict([("a", "1"), ("b", "2"), ("a", "3")])
    q.setlist("a", ["x"])
    assert q.pairs() == [("a", "x"), ("b", "2")]
