import pytest

from sluggard import UniqueSlugger


def test_existing_slug_gets_numbered_suffix():
    slugs = UniqueSlugger(existing={"hello-world"})
    assert slugs.make("Hello, World!") == "hello-world-2"
    assert slugs.make("hello world") == "hello-world-3"


def test_distinct_titles_keep_their_slugs():
    slugs = UniqueSlugger()
    assert [slugs.make(t) for t in ("One", "Two", "one!")] == ["one", "two", "one-2"]


def test_release_frees_a_slug():
    slugs = UniqueSlugger()
    first = slugs.make("Post")
    slugs.release(first)
    assert slugs.make("Post") == "post"


def test_reserve_rejects_taken_slug():
    slugs = UniqueSlugger(existing={"about"})
    with pytest.raises(ValueError, match="already taken"):
        slugs.reserve("about")


def test_short_titles_with_max_length():
    slugs = UniqueSlugger(max_length=20)
    assert slugs.make("Short") == "short"
    assert slugs.make("Short") == "short-2"


def test_untransliterable_title_falls_back():
    assert UniqueSlugger().make("日本") == "item"
