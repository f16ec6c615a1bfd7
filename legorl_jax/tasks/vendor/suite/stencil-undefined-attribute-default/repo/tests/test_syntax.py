import pytest

from stencil import Environment, TemplateSyntaxError


def compile_(source):
    return Environment().from_string(source)


def test_comments_are_removed():
    assert compile_("a{# note #}b").render() == "ab"


@pytest.mark.parametrize(
    "source, message",
    [
        ("{% if x %}open", "never closed"),
        ("{{ x ", "unclosed"),
        ("{% endfor %}", "without an opening tag"),
        ("{% for x in xs %}{% endif %}", "closes"),
        ("{{ x._secret }}", "invalid attribute name"),
        ("{% while x %}", "unknown tag"),
    ],
    ids=["unclosed-block", "unclosed-output", "stray-end", "mismatched-end", "private-attr", "unknown-tag"],
)
def test_syntax_errors(source, message):
    with pytest.raises(TemplateSyntaxError, match=message):
        compile_(source)


def test_error_reports_line_number():
    with pytest.raises(TemplateSyntaxError, match="line 3"):
        compile_("a\nb\n{% bogus %}")
