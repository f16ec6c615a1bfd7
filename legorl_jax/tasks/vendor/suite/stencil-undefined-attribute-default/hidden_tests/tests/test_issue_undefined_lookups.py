import pytest

from stencil import Environment, UndefinedError


def render(source, strict=False, **variables):
    return Environment(strict=strict).from_string(source).render(**variables)


class User:
    def __init__(self, name):
        self.name = name


def test_default_for_missing_key():
    assert render("{{ user.nickname|default('anonymous') }}", user={"name": "ann"}) == "anonymous"


def test_default_for_missing_attribute_and_missing_item():
    assert render("{{ u.email|default('n/a') }}", u=User("bo")) == "n/a"
    assert render("{{ d['gone']|default('-') }}", d={}) == "-"


def test_default_for_nested_missing_lookup():
    assert render("{{ user.address.city|default('?') }}", user={"name": "ann"}) == "?"
    assert render("{{ nobody.address.city|default('?') }}") == "?"


def test_missing_key_is_false_and_empty():
    src = "{% if user.admin %}admin{% else %}user{% endif %}|{% for t in user.tags %}{{ t }}{% else %}no tags{% endfor %}"
    assert render(src, user={"name": "ann"}) == "user|no tags"
    assert render("[{{ user.nickname }}]", user={"name": "ann"}) == "[]"


def test_strict_mode_still_reports_missing_key_but_allows_default():
    with pytest.raises(UndefinedError, match="nickname"):
        render("{{ user.nickname }}", strict=True, user={"name": "ann"})
    assert render("{{ user.nickname|default('anon') }}", strict=True, user={"name": "ann"}) == "anon"
    assert render("{{ user.a.b|default('deep') }}", strict=True, user={}) == "deep"


def test_existing_values_are_not_replaced():
    assert render("{{ user.name|default('x') }}", user={"name": "ann"}) == "ann"
    assert render("{{ u.name|default('x') }}", u=User("bo")) == "bo"
