import pytest

from wrapwell import display_width, fill, wrap


def test_wrap_packs_words_greedily():
    assert wrap("The quick brown fox jumps over the lazy dog", 13) == [
        "The quick",
        "brown fox",
        "jumps over",
        "the lazy dog",
    ]


def test_no_line_exceeds_width_for_prose():
    text = "It was the best of times, it was the worst of times, it was the age of wisdom"
    for width in (9, 17, 23):
        assert all(len(line) <= width for line in wrap(text, width))


def test_indents_count_toward_width():
    lines = wrap("one two three four five six", 13, initial_indent="* ", subsequent_indent="  ")
    assert lines == ["* one two", "  three four", "  five six"]


def test_long_word_is_broken_at_hyphen():
    assert wrap("state-of-the-art", 10) == ["state-of-", "the-art"]


def test_long_word_kept_whole_when_breaking_disabled():
    assert wrap("a supercalifragilistic b", 8, break_long_words=False) == ["a", "supercalifragilistic", "b"]


def test_wide_characters_take_two_columns():
    assert display_width("日本語") == 6
    assert wrap("日本 語学 校", 5) == ["日本", "語学", "校"]


def test_fill_wraps_paragraphs_separately():
    assert fill("aa bb cc\n\ndd ee", 6) == "aa bb\ncc\n\ndd ee"


def test_indent_too_wide_is_rejected():
    with pytest.raises(ValueError, match="initial_indent"):
        wrap("x", 4, initial_indent="    ")
