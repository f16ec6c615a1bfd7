from wrapwell import fill, justify, wrap


def test_line_that_exactly_fills_width_is_kept_together():
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]


def test_words_filling_width_with_indent_stay_on_one_line():
    assert wrap("one two three", 9, initial_indent="- ") == ["- one two", "three"]


def test_text_exactly_width_long_is_one_line():
    text = "The quick brown fox"
    assert wrap(text, len(text)) == [text]
    assert fill(text, len(text)) == text


def test_wide_characters_exactly_filling_width():
    assert wrap("日本 語", 7) == ["日本 語"]


def test_justified_output_uses_full_width_lines():
    assert justify("ab cd ef gh", 5) == "ab cd\nef gh"


def test_lines_never_exceed_width():
    text = "aa bb cc dd ee ff gg hh ii jj"
    for width in range(3, 15):
        assert all(len(line) <= width for line in wrap(text, width))
