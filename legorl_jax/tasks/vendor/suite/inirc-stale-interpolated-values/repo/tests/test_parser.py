import pytest

from inirc import DuplicateError, ParseError, parse


def test_sections_keys_and_comments():
    text = "# top\n[a]\nKey = 1\nother: two words\n; note\n[b]\nx=\n"
    assert parse(text) == {"a": {"key": "1", "other": "two words"}, "b": {"x": ""}}


def test_continuation_lines_join_with_newlines():
    assert parse("[s]\nitems = one\n    two\n\tthree\n") == {"s": {"items": "one\ntwo\nthree"}}


def test_errors_carry_line_numbers():
    with pytest.raises(ParseError, match="line 1: option before any"):
        parse("k = v\n")
    with pytest.raises(DuplicateError, match="line 3"):
        parse("[s]\nk = 1\nK = 2\n")
    with pytest.raises(ParseError, match="line 2: expected 'key = value'"):
        parse("[s]\njust words\n")
