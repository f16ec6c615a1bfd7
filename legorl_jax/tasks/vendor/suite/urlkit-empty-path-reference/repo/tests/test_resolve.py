from urlkit import normalize, remove_dot_segments, resolve

BASE = "http://a/b/c/d;p?q"

# RFC 3986 section 5.4.1 and 5.4.2.
EXAMPLES = {
    "g:h": "g:h",
    "g": "http://a/b/c/g",
    "./g": "http://a/b/c/g",
    "g/": "http://a/b/c/g/",
    "/g": "http://a/g",
    "//g": "http://g",
    "g?y": "http://a/b/c/g?y",
    "g#s": "http://a/b/c/g#s",
    "g?y#s": "http://a/b/c/g?y#s",
    ";x": "http://a/b/c/;x",
    "g;x": "http://a/b/c/g;x",
    "g;x?y#s": "http://a/b/c/g;x?y#s",
    ".": "http://a/b/c/",
    "./": "http://a/b/c/",
    "..": "http://a/b/",
    "../": "http://a/b/",
    "../g": "http://a/b/g",
    "../..": "http://a/",
    "../../g": "http://a/g",
    "../../../g": "http://a/g",
    "/./g": "http://a/g",
    "/../g": "http://a/g",
    "g.": "http://a/b/c/g.",
    "..g": "http://a/b/c/..g",
    "./../g": "http://a/b/g",
    "g/./h": "http://a/b/c/g/h",
    "g/../h": "http://a/b/c/h",
    "g?y/./x": "http://a/b/c/g?y/./x",
    "g#s/../x": "http://a/b/c/g#s/../x",
    "http:g": "http:g",
}


def test_rfc_examples():
    wrong = {ref: resolve(BASE, ref) for ref, expected in EXAMPLES.items() if resolve(BASE, ref) != expected}
    assert wrong == {}


def test_remove_dot_segments_from_rfc():
    assert remove_dot_segments("/a/b/c/./../../g") == "/a/g"
    assert remove_dot_segments("mid/content=5/../6") == "mid/6"


def test_base_without_path():
    assert resolve("http://h", "x") == "http://h/x"


def test_normalize_case_ports_and_escapes():
    assert normalize("HTTP://Example.COM:80/%7efoo/./bar") == "http://example.com/~foo/bar"
    assert normalize("https://h:443") == "https://h/"
    assert normalize("http://h/a%2fb?q=%3d") == "http://h/a%2Fb?q=%3D"
