import pytest

from urlkit import resolve

BASE = "http://a/b/c/d;p?q"


def test_query_only_reference_keeps_base_path():
    assert resolve(BASE, "?y") == "http://a/b/c/d;p?y"


def test_fragment_only_reference_keeps_path_and_query():
    assert resolve(BASE, "#s") == "http://a/b/c/d;p?q#s"


def test_empty_reference_is_the_base_without_fragment():
    assert resolve(BASE, "") == "http://a/b/c/d;p?q"
    assert resolve(BASE + "#old", "") == "http://a/b/c/d;p?q"


@pytest.mark.parametrize(
    "base, ref, expected",
    [
        ("https://shop.example/items/list?page=2", "?page=3", "https://shop.example/items/list?page=3"),
        ("https://docs.example/guide/intro.html", "#install", "https://docs.example/guide/intro.html#install"),
        ("https://h/p/", "?", "https://h/p/?"),
        ("http://h", "?x=1", "http://h?x=1"),
        ("http://h/a/b?q", "#", "http://h/a/b?q#"),
    ],
    ids=["pagination", "anchor", "empty-query", "no-path", "empty-fragment"],
)
def test_same_document_references(base, ref, expected):
    assert resolve(base, ref) == expected


def test_relative_path_with_query_unchanged():
    assert resolve(BASE, "g?y") == "http://a/b/c/g?y"
