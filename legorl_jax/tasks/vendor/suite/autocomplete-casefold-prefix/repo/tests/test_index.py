import pytest

from typeahead import CompletionIndex


def cities():
    index = CompletionIndex()
    index.add("New York", weight=10)
    index.add("Newark", weight=3)
    index.add("new delhi", weight=7)
    index.add("Boston", weight=7)
    return index


def test_completions_are_ranked_by_weight():
    assert cities().complete("ne") == ["New York", "new delhi", "Newark"]


def test_matching_ignores_ascii_case_and_extra_spaces():
    index = cities()
    assert index.complete("NEW   ") == ["New York", "new delhi"]
    assert index.complete("  bos") == ["Boston"]


def test_ties_are_alphabetical():
    index = CompletionIndex()
    for name in ["beta", "Alpha", "gamma"]:
        index.add(name, weight=1)
    assert index.complete("", limit=2) == ["Alpha", "beta"]


def test_decomposed_accents_match_composed_ones():
    index = CompletionIndex()
    index.add("Caf\u00e9 Central")
    assert index.complete("cafe\u0301") == ["Caf\u00e9 Central"]


def test_re_adding_keeps_first_spelling_and_updates_weight():
    index = cities()
    index.add("NEW YORK", weight=1)
    assert index.complete("new") == ["new delhi", "Newark", "New York"]
    assert len(index) == 4


def test_bump_and_remove():
    index = cities()
    assert index.bump("newark", 10) == 13
    assert index.complete("new", limit=1) == ["Newark"]
    index.remove("Newark")
    assert "Newark" not in index
    with pytest.raises(KeyError):
        index.bump("Newark")


def test_bad_arguments_are_rejected():
    index = cities()
    with pytest.raises(ValueError, match="-1"):
        index.add("Paris", weight=-1)
    with pytest.raises(ValueError, match="0"):
        index.complete("p", limit=0)
    with pytest.raises(ValueError, match="non-space"):
        index.add("   ")
    with pytest.raises(TypeError, match="prefix"):
        index.complete(None)
