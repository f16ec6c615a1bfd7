import pytest

from stockroom import InsufficientStock, OrderError, OrderStatus, Warehouse, low_stock, stock_report


def stocked():
    wh = Warehouse()
    wh.receive("MUG-01", 10)
    wh.receive("TEE-M", 4)
    return wh


def test_placing_an_order_reserves_stock():
    wh = stocked()
    wh.place_order("A100", {"MUG-01": 3})
    assert (wh.on_hand("MUG-01"), wh.reserved("MUG-01"), wh.available("MUG-01")) == (10, 3, 7)


def test_orders_beyond_availability_are_refused_atomically():
    wh = stocked()
    wh.place_order("A1", {"TEE-M": 3})
    with pytest.raises(InsufficientStock, match="only 1 available"):
        wh.place_order("A2", {"MUG-01": 1, "TEE-M": 2})
    assert wh.reserved("MUG-01") == 0
    assert "A2" not in wh.orders


def test_cancelling_releases_the_reservation():
    wh = stocked()
    wh.place_order("A1", {"MUG-01": 5, "TEE-M": 1})
    assert wh.cancel_order("A1") == {"MUG-01": 5, "TEE-M": 1}
    assert wh.available("MUG-01") == 10
    with pytest.raises(OrderError, match="cancelled"):
        wh.ship_order("A1")


def test_shipping_takes_units_off_the_shelf():
    wh = stocked()
    wh.place_order("A1", {"MUG-01": 3})
    assert wh.ship_order("A1") == {"MUG-01": 3}
    assert wh.on_hand("MUG-01") == 7
    assert wh.orders["A1"].status is OrderStatus.SHIPPED
    assert wh.ledger.movements("MUG-01")[-1].reference == "A1"


def test_partial_shipments_track_what_is_outstanding():
    wh = stocked()
    wh.place_order("A1", {"MUG-01": 3, "TEE-M": 2})
    wh.ship_order("A1", {"MUG-01": 1})
    order = wh.orders["A1"]
    assert order.status is OrderStatus.PARTIALLY_SHIPPED
    assert order.outstanding() == {"MUG-01": 2, "TEE-M": 2}
    with pytest.raises(OrderError, match="2 x MUG-01 left to ship, not 5"):
        wh.ship_order("A1", {"MUG-01": 5})
    wh.ship_order("A1")
    assert order.status is OrderStatus.SHIPPED
    assert wh.on_hand("MUG-01") == 7 and wh.on_hand("TEE-M") == 2


def test_adjustments_cannot_eat_reserved_stock():
    wh = stocked()
    wh.place_order("A1", {"TEE-M": 3})
    with pytest.raises(InsufficientStock):
        wh.adjust("TEE-M", -2, "miscount")
    wh.adjust("TEE-M", -1, "miscount")
    assert wh.available("TEE-M") == 0


def test_report_and_low_stock_with_open_orders():
    wh = stocked()
    wh.place_order("A1", {"TEE-M": 3})
    rows = stock_report(wh)
    assert [(r.sku, r.on_hand, r.reserved, r.available) for r in rows] == [
        ("MUG-01", 10, 0, 10), ("TEE-M", 4, 3, 1)]
    assert low_stock(wh, {"MUG-01": 2, "TEE-M": 2}) == ["TEE-M"]


def test_order_validation():
    wh = stocked()
    with pytest.raises(ValueError, match="no lines"):
        wh.place_order("A1", {})
    with pytest.raises(ValueError, match="positive"):
        wh.place_order("A1", {"MUG-01": 0})
    wh.place_order("A1", {"MUG-01": 1})
    with pytest.raises(OrderError, match="already exists"):
        wh.place_order("A1", {"MUG-01": 1})
    with pytest.raises(OrderError, match="unknown order 'Z9'"):
        wh.ship_order("Z9")
