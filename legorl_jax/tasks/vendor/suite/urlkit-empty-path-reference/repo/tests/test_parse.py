import pytest

from urlkit import URLError, compose, parse_url


def test_components_and_authority_parts():
    url = parse_url("https://user:pw@example.com:8443/a/b?x=1#frag")
    assert (url.scheme, url.authority, url.path, url.query, url.fragment) == (
        "https", "user:pw@example.com:8443", "/a/b", "x=1", "frag",
    )
    assert (url.userinfo, url.host, url.port) == ("user:pw", "example.com", 8443)


def test_absent_and_empty_query_differ():
    assert parse_url("http://h/p").query is None
    assert parse_url("http://h/p?").query == ""
    assert compose(parse_url("http://h/p?#")) == "http://h/p?#"


def test_ipv6_host():
    url = parse_url("http://[::1]:8080/")
    assert (url.host, url.port) == ("[::1]", 8080)


def test_relative_references_have_no_scheme():
    url = parse_url("../g?y")
    assert (url.scheme, url.authority, url.path, url.query) == (None, None, "../g", "y")


def test_invalid_urls():
    with pytest.raises(URLError, match="whitespace"):
        parse_url("http://h/a b")
    with pytest.raises(URLError, match="port 70000"):
        parse_url("http://h:70000/")
