import pytest

from typeahead import Trie


def test_items_under_prefix_are_in_key_order():
    trie = Trie()
    for word in ["tea", "ten", "to", "inn", "tent", "te"]:
        trie[word] = len(word)
    assert [k for k, _ in trie.items("te")] == ["te", "tea", "ten", "tent"]
    assert [k for k, _ in trie.items()] == ["inn", "te", "tea", "ten", "tent", "to"]
    assert list(trie.items("x")) == []


def test_delete_prunes_dead_branches():
    trie = Trie()
    trie["card"] = 1
    trie["care"] = 2
    del trie["card"]
    assert not trie.has_prefix("card")
    assert trie.has_prefix("car")
    assert len(trie) == 1
    with pytest.raises(KeyError):
        del trie["car"]


def test_longest_prefix_of():
    trie = Trie()
    trie["http"] = 1
    trie["https"] = 2
    assert trie.longest_prefix_of("https://example.org") == "https"
    assert trie.longest_prefix_of("ftp://") is None


def test_non_string_keys_are_rejected():
    with pytest.raises(TypeError, match="int"):
        Trie()[3] = "x"
