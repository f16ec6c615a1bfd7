import pytest

from pubsub import matches, validate_pattern


def test_single_segment_wildcard():
    assert matches("order.*", "order.created")
    assert not matches("order.*", "order.item.added")
    assert not matches("order.*", "order")
    assert matches("*.created", "user.created")


def test_multi_segment_wildcard():
    assert matches("order.**", "order.item.added")
    assert matches("order.**", "order")
    assert matches("**.failed", "job.42.failed")
    assert matches("**", "anything.at.all")
    assert not matches("order.**.added", "order.item.removed")


def test_invalid_patterns_and_topics():
    with pytest.raises(ValueError, match="'ord\\*'"):
        validate_pattern("ord*.x")
    with pytest.raises(ValueError, match="empty segment"):
        matches("a..b", "a.b")
    with pytest.raises(ValueError, match="wildcards"):
        matches("a", "a.*")
