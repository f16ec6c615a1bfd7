from wrapwell import center, dedent, indent, justify


def test_justify_spreads_spaces_and_leaves_last_line():
    assert justify("aa b cc dd e", 9) == "aa  b  cc\ndd e"


def test_center_puts_odd_column_on_the_right():
    assert center("ab", 5, ".") == ".ab.."


def test_dedent_removes_common_prefix():
    assert dedent("    a\n      b\n\n    c") == "a\n  b\n\nc"


def test_indent_skips_blank_lines():
    assert indent("a\n\nb\n", "> ") == "> a\n\n> b\n"
