from mdlite import to_html


def test_heading_and_paragraph():
    assert to_html("# Title\n\nSome text\nmore text") == "<h1>Title</h1>\n<p>Some text\nmore text</p>"


def test_bullet_and_ordered_lists():
    assert to_html("- a\n- b") == "<ul>\n<li>a</li>\n<li>b</li>\n</ul>"
    assert to_html("3. x\n4. y") == '<ol start="3">\n<li>x</li>\n<li>y</li>\n</ol>'


def test_fenced_code_is_escaped_and_not_formatted():
    src = "```python\nif a < b and *x*:\n```"
    assert to_html(src) == '<pre><code class="language-python">if a &lt; b and *x*:\n</code></pre>'


def test_block_quote_renders_nested_markdown():
    assert to_html("> ## Note\n> be careful") == "<blockquote>\n<h2>Note</h2>\n<p>be careful</p>\n</blockquote>"


def test_horizontal_rule():
    assert to_html("a\n\n---\n\nb") == "<p>a</p>\n<hr />\n<p>b</p>"
