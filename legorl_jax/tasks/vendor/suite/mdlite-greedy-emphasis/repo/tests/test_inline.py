from mdlite import render_inline


def test_emphasis_and_strong():
    assert render_inline("a *word* here") == "a <em>word</em> here"
    assert render_inline("a **word** here") == "a <strong>word</strong> here"
    assert render_inline("_under_ and __score__") == "<em>under</em> and <strong>score</strong>"


def test_intraword_underscores_are_literal():
    assert render_inline("snake_case_name") == "snake_case_name"


def test_code_span_is_not_formatted():
    assert render_inline("use `*args` here") == "use <code>*args</code> here"


def test_links_and_images():
    assert render_inline('[docs](https://x.org/a?b=1&c=2 "The docs")') == (
        '<a href="https://x.org/a?b=1&amp;c=2" title="The docs">docs</a>'
    )
    assert render_inline("![logo](/img/l.png)") == '<img src="/img/l.png" alt="logo" />'


def test_unsafe_link_scheme_is_neutralised():
    assert render_inline("[x](javascript:alert)") == '<a href="#">x</a>'
    assert render_inline("[y](data:text/html;base64,AAAA)") == '<a href="#">y</a>'


def test_raw_html_is_escaped():
    assert render_inline("<script>x</script> & co") == "&lt;script&gt;x&lt;/script&gt; &amp; co"
