import pytest

from stencil import Environment, TemplateError, UndefinedError


def render(source, strict=False, **variables):
    return Environment(strict=strict).from_string(source).render(**variables)


def test_readme_example():
    src = "Hello {{ user.name|title }}{% if user.admin %} (admin){% endif %}!"
    assert render(src, user={"name": "ada lovelace", "admin": True}) == "Hello Ada Lovelace (admin)!"


def test_attribute_lookup_on_objects_and_items():
    class Point:
        x = 3

    assert render("{{ p.x }},{{ xs[1] }},{{ d['k'] }}", p=Point(), xs=[1, 2], d={"k": "v"}) == "3,2,v"


def test_if_elif_else():
    src = "{% if n > 1 %}many{% elif n == 1 %}one{% else %}none{% endif %}"
    assert [render(src, n=n) for n in (0, 1, 5)] == ["none", "one", "many"]


def test_for_loop_variables_and_else():
    src = "{% for x in xs %}{{ loop.index }}:{{ x }}{% if not loop.last %}, {% endif %}{% else %}empty{% endfor %}"
    assert render(src, xs=["a", "b"]) == "1:a, 2:b"
    assert render(src, xs=[]) == "empty"


def test_loop_scope_does_not_leak():
    assert render("{% for x in xs %}{% endfor %}[{{ x }}]", xs=[1, 2], x="outer") == "[outer]"


def test_missing_top_level_name():
    assert render("[{{ missing }}]") == "[]"
    assert render("{{ missing|default('fallback') }}") == "fallback"
    assert render("{% if missing %}yes{% else %}no{% endif %}") == "no"


def test_strict_mode_raises_for_missing_name():
    with pytest.raises(UndefinedError, match="'missing' is undefined"):
        render("{{ missing }}", strict=True)
    assert render("{{ missing|default('x') }}", strict=True) == "x"


def test_filters_chain_with_arguments():
    assert render("{{ words|join(', ')|upper }}", words=["a", "b"]) == "A, B"
    assert render("{{ text|truncate(8) }}", text="a long sentence") == "a lon..."
    assert render("{{ ''|default('empty', true) }}") == "empty"


def test_unknown_filter_is_an_error():
    with pytest.raises(TemplateError, match="unknown filter 'shout'"):
        render("{{ x|shout }}", x=1)
