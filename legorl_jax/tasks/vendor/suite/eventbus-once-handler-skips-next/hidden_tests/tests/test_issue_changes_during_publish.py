from pubsub import EventBus


def test_once_handler_does_not_skip_the_next_handler():
    bus, seen = EventBus(), []
    bus.subscribe("order.created", lambda e: seen.append("welcome"), once=True)
    bus.subscribe("order.created", lambda e: seen.append("email"))
    bus.subscribe("order.created", lambda e: seen.append("stats"))
    assert bus.publish("order.created") == 3
    assert seen == ["welcome", "email", "stats"]
    assert bus.publish("order.created") == 2
    assert seen[3:] == ["email", "stats"]


def test_consecutive_once_handlers_all_run():
    bus, seen = EventBus(), []
    for name in "abcd":
        bus.subscribe("t", lambda e, name=name: seen.append(name), once=True)
    assert bus.publish("t") == 4
    assert seen == ["a", "b", "c", "d"]
    assert len(bus) == 0


def test_handler_unsubscribing_itself():
    bus, seen = EventBus(), []
    subs = {}

    def self_removing(event):
        seen.append("self")
        subs["me"].cancel()

    subs["me"] = bus.subscribe("t", self_removing)
    bus.subscribe("t", lambda e: seen.append("after"))
    assert bus.publish("t") == 2
    assert seen == ["self", "after"]


def test_handler_unsubscribed_by_an_earlier_one_is_not_called():
    bus, seen = EventBus(), []
    later = {}
    bus.subscribe("t", lambda e: later["sub"].cancel(), priority=1)
    later["sub"] = bus.subscribe("t", lambda e: seen.append("later"))
    bus.subscribe("t", lambda e: seen.append("last"))
    assert bus.publish("t") == 2
    assert seen == ["last"]


def test_handler_subscribed_during_publish_waits_for_the_next_event():
    bus, seen = EventBus(), []
    recruited = []

    def recruiter(event):
        seen.append(("recruiter", event.sequence))
        if not recruited:
            recruited.append(bus.subscribe("t", lambda e: seen.append(("urgent", e.sequence)), priority=100))
            recruited.append(bus.subscribe("t", lambda e: seen.append(("late", e.sequence)), priority=-100))

    sub = bus.subscribe("t", recruiter)
    assert bus.publish("t") == 1
    assert seen == [("recruiter", 1)]
    sub.cancel()
    seen.clear()
    assert bus.publish("t") == 2
    assert seen == [("urgent", 2), ("late", 2)]
