from mdlite import render_inline, to_html


def test_two_emphasized_words_on_one_line():
    assert render_inline("*one* and *two*") == "<em>one</em> and <em>two</em>"


def test_three_underscore_emphases():
    assert render_inline("_a_, _b_ or _c_") == "<em>a</em>, <em>b</em> or <em>c</em>"


def test_emphasis_next_to_strong_and_list_items():
    assert render_inline("**bold** *it* then *more*") == "<strong>bold</strong> <em>it</em> then <em>more</em>"
    assert to_html("- *x* vs *y*") == "<ul>\n<li><em>x</em> vs <em>y</em></li>\n</ul>"


def test_multi_word_emphasis_still_works():
    assert render_inline("say *hello there* now") == "say <em>hello there</em> now"
