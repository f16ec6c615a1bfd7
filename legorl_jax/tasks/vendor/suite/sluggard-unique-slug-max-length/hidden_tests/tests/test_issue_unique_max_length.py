from sluggard import UniqueSlugger

TITLE = "Quarterly report on regional sales figures"


def test_long_title_twice_gives_distinct_slugs_within_limit():
    slugs = UniqueSlugger(max_length=20)
    first, second = slugs.make(TITLE), slugs.make(TITLE)
    assert first == "quarterly-report-on"
    assert second != first
    assert len(second) <= 20
    assert second.endswith("-2")


def test_many_collisions_stay_unique_and_short():
    slugs = UniqueSlugger(max_length=16)
    made = [slugs.make(TITLE) for _ in range(12)]
    assert len(set(made)) == 12
    assert all(len(s) <= 16 for s in made)
    assert made[10].endswith("-11")


def test_collision_with_existing_long_slug():
    slugs = UniqueSlugger(existing={"quarterly-report"}, max_length=16)
    got = slugs.make(TITLE)
    assert got != "quarterly-report" and len(got) <= 16 and got.endswith("-2")


def test_single_long_word_title_with_limit():
    slugs = UniqueSlugger(max_length=8)
    made = {slugs.make("Supercalifragilistic") for _ in range(3)}
    assert len(made) == 3 and all(len(s) <= 8 for s in made)


def test_suffix_unchanged_when_there_is_room():
    slugs = UniqueSlugger(existing={"post"}, max_length=20)
    assert slugs.make("Post") == "post-2"
