import pytest

from pubsub import DeliveryError, EventBus


def test_readme_example_order_and_counts():
    bus, seen = EventBus(), []
    bus.subscribe("order.created", lambda e: seen.append("email"))
    bus.subscribe("order.*", lambda e: seen.append("audit"), priority=10)
    bus.subscribe("order.created", lambda e: seen.append("first"), once=True)
    assert bus.publish("order.created", {"id": 1}) == 3
    assert bus.publish("order.created", {"id": 2}) == 2
    assert seen == ["audit", "email", "first", "audit", "email"]


def test_equal_priorities_run_in_subscription_order():
    bus, seen = EventBus(), []
    for name in "abc":
        bus.subscribe("t", lambda e, name=name: seen.append(name), priority=1)
    bus.subscribe("t", lambda e: seen.append("z"), priority=5)
    bus.publish("t")
    assert seen == ["z", "a", "b", "c"]


def test_event_carries_topic_payload_and_sequence():
    bus, events = EventBus(), []
    bus.subscribe("**", events.append)
    bus.publish("a.b", 1)
    bus.publish("c", 2)
    assert [(e.topic, e.payload, e.sequence) for e in events] == [("a.b", 1, 1), ("c", 2, 2)]


def test_unsubscribe_and_cancel_between_publishes():
    bus, seen = EventBus(), []
    sub = bus.subscribe("t", lambda e: seen.append(1))
    assert sub.cancel()
    assert not sub.cancel()
    assert bus.publish("t") == 0
    assert len(bus) == 0 and seen == []


def test_collect_policy_reports_all_failures():
    bus, seen = EventBus(errors="collect"), []

    def broken(event):
        raise RuntimeError("boom")

    bus.subscribe("t", broken, priority=1)
    bus.subscribe("t", lambda e: seen.append("ok"))
    with pytest.raises(DeliveryError, match="1 handler"):
        bus.publish("t")
    assert seen == ["ok"]


def test_raise_policy_stops_at_first_failure():
    bus = EventBus()
    bus.subscribe("t", lambda e: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bus.publish("t")


def test_replay_delivers_history_to_late_subscribers():
    bus = EventBus(history=10)
    bus.publish("job.1.done", "a")
    bus.publish("job.2.failed", "b")
    bus.publish("job.3.done", "c")
    seen = []
    bus.subscribe("job.*.done", lambda e: seen.append(e.payload), replay=True)
    assert seen == ["a", "c"]
    once_seen = []
    sub = bus.subscribe("job.**", lambda e: once_seen.append(e.payload), once=True, replay=True)
    assert once_seen == ["a"] and not sub.active


def test_subscribe_validation():
    bus = EventBus()
    with pytest.raises(TypeError, match="callable"):
        bus.subscribe("t", "not a function")
    with pytest.raises(ValueError, match="'ignore'"):
        EventBus(errors="ignore")
