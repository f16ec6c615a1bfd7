import pytest

from sluggard import fit_length, slugify, transliterate


def test_basic_title():
    assert slugify("Hello, World!") == "hello-world"


def test_accents_and_special_letters_transliterate():
    assert slugify("Crème Brûlée: a Straße story") == "creme-brulee-a-strasse-story"
    assert slugify("Łódź & Øresund") == "lodz-and-oresund"


def test_apostrophes_do_not_split_words():
    assert slugify("Don’t Stop") == "dont-stop"


def test_stopwords_removed_but_never_everything():
    assert slugify("The Art of War", stopwords="english") == "art-war"
    assert slugify("The And", stopwords="english") == "the-and"


def test_max_length_cuts_at_word_boundary():
    assert slugify("A very long title indeed", max_length=12) == "a-very-long"
    assert slugify("Supercalifragilistic", max_length=5) == "super"


def test_custom_separator_and_case():
    assert slugify("Hello World", separator="_", lowercase=False) == "Hello_World"


def test_fit_length_leaves_short_slugs_alone():
    assert fit_length("abc-def", 7) == "abc-def"
    assert fit_length("abc-def", 6) == "abc"


def test_non_latin_scripts_drop_to_nothing():
    assert transliterate("日本") == ""
    with pytest.raises(ValueError, match="separator"):
        slugify("x", separator="a")
